#include "weft/core/text_file.h"

#include <fstream>
#include <sstream>

namespace weft {

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return std::nullopt;
  return ss.str();
}

}  // namespace weft
