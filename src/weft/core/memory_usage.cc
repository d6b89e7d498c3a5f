#include "weft/core/memory_usage.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <fstream>
#include <string>

namespace weft {
namespace {
// `key`'s value in a /proc file of "Key:   123 kB" lines, in bytes; -1 when absent.
int64_t proc_kib(const char* path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size())) * 1024;
  }
  return -1;
}

// A file of this process's cgroup (v2: the "0::/path" line of /proc/self/cgroup) holding one
// number of bytes; -1 when absent or "max" (no limit).
int64_t cgroup_bytes(const std::string& file) {
  std::ifstream self("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  std::ifstream f("/sys/fs/cgroup" + path + "/" + file);
  std::string v;
  if (!(f >> v) || v == "max") return -1;
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    return -1;
  }
}
}  // namespace

int64_t peak_resident_bytes() { return proc_kib("/proc/self/status", "VmHWM:"); }
int64_t current_resident_bytes() { return proc_kib("/proc/self/status", "VmRSS:"); }

int64_t available_memory_bytes() {
  int64_t avail = proc_kib("/proc/meminfo", "MemAvailable:");
  const int64_t limit = cgroup_bytes("memory.max"), used = cgroup_bytes("memory.current");
  if (limit > 0 && used >= 0) {
    const int64_t left = std::max<int64_t>(0, limit - used);
    avail = avail < 0 ? left : std::min(avail, left);
  }
  return avail;
}

bool reset_peak_resident() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

void fix_mmap_threshold() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes));
  // The dynamic adjustment also raised the trim threshold (to twice the mmap threshold), so free
  // heap of that size stayed at the top and served any request: back to glibc's default, as a
  // process started with MALLOC_MMAP_THRESHOLD_ has it (the A/B of memory_usage.h ran so).
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
#endif
}

bool forget_burst() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  return reset_peak_resident();
}

}  // namespace weft
