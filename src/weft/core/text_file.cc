#include "weft/core/text_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace weft {

std::optional<std::string> read_text_file(const std::string& path) {
  // Not a FIFO or a device, which could block forever or never end; not a directory.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return std::nullopt;
  return ss.str();
}

}  // namespace weft
