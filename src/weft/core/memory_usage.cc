#include "weft/core/memory_usage.h"

#include <fstream>
#include <string>

namespace weft {
namespace {
int64_t status_kib(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size())) * 1024;
  }
  return -1;
}
}  // namespace

int64_t peak_resident_bytes() { return status_kib("VmHWM:"); }
int64_t current_resident_bytes() { return status_kib("VmRSS:"); }

bool reset_peak_resident() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

}  // namespace weft
