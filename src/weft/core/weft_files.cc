#include "weft/core/weft_files.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

namespace weft {

namespace fs = std::filesystem;

std::string find_weft_file(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (path.empty() || p.is_absolute() || fs::exists(p, ec)) return path;
  std::vector<fs::path> roots;
  if (const char* home = std::getenv("WEFT_HOME"); home != nullptr && *home != '\0') {
    roots.emplace_back(home);
  }
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) roots.push_back(exe.parent_path().parent_path().parent_path().parent_path());
#ifdef WEFT_SOURCE_ROOT
  roots.emplace_back(WEFT_SOURCE_ROOT);
#endif
  for (const fs::path& root : roots) {
    const fs::path candidate = root / p;
    if (fs::exists(candidate, ec)) return candidate.string();
  }
  return path;
}

}  // namespace weft
