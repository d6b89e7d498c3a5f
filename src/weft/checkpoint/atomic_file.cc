#include "weft/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace weft::checkpoint {

Status fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error(fmt::format("{}: cannot open to sync: {}", path, strerror(errno)));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Status::error(fmt::format("{}: fsync failed: {}", path, strerror(err)));
  return {};
}

Status write_file_atomic(const std::string& path, std::string_view content) {
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::error(fmt::format("{}: cannot create: {}", tmp, strerror(errno)));
  const char* p = content.data();
  size_t left = content.size();
  std::string problem;
  while (left > 0 && problem.empty()) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      problem = fmt::format("{}: write failed: {}", tmp, strerror(errno));
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (problem.empty() && ::fsync(fd) != 0) {
    problem = fmt::format("{}: fsync failed: {}", tmp, strerror(errno));
  }
  if (::close(fd) != 0 && problem.empty()) {
    problem = fmt::format("{}: close failed: {}", tmp, strerror(errno));
  }
  if (problem.empty() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    problem = fmt::format("{}: cannot rename {} onto it: {}", path, tmp, strerror(errno));
  }
  if (!problem.empty()) {
    std::remove(tmp.c_str());
    return Status::error(problem);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  return fsync_path(dir.empty() ? "." : dir);
}

}  // namespace weft::checkpoint
