#include "weft/core/pending_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "weft/core/check.h"

namespace weft {

namespace {
constexpr size_t kWriteBuffer = 1 << 20;
}

Result<PendingFile> PendingFile::create(const std::string& path) {
  PendingFile f;
  f.path_ = path;
  f.temp_path_ = path + ".tmp-" + std::to_string(::getpid());
  f.fd_ = ::open(f.temp_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd_ < 0)
    return Status::error(f.temp_path_ + ": cannot create: " + std::string(std::strerror(errno)));
  f.buffer_.reserve(kWriteBuffer);
  return f;
}

PendingFile::PendingFile(PendingFile&& other) noexcept { *this = std::move(other); }

PendingFile& PendingFile::operator=(PendingFile&& other) noexcept {
  if (this != &other) {
    discard();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    buffer_ = std::move(other.buffer_);
    committed_ = std::exchange(other.committed_, true);
  }
  return *this;
}

PendingFile::~PendingFile() { discard(); }

void PendingFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  committed_ = true;
}

Status PendingFile::write_all(const char* p, size_t n, int64_t offset) {
  const int err = write_fully(fd_, p, static_cast<int64_t>(n), offset);
  if (err == 0) return {};
  return Status::error(temp_path_ + ": write failed: " + std::string(std::strerror(err)));
}

Status PendingFile::flush() {
  Status s = write_all(buffer_.data(), buffer_.size());
  buffer_.clear();
  return s;
}

Status PendingFile::write(const void* bytes, int64_t n) {
  WEFT_CHECK(fd_ >= 0, temp_path_, " is closed");
  if (buffer_.size() + static_cast<size_t>(n) > kWriteBuffer) {
    if (auto s = flush(); !s.ok()) return s;
  }
  if (static_cast<size_t>(n) >= kWriteBuffer) {  // large: straight through, no copy
    if (auto s = write_all(static_cast<const char*>(bytes), static_cast<size_t>(n)); !s.ok()) {
      return s;
    }
  } else {
    buffer_.append(static_cast<const char*>(bytes), static_cast<size_t>(n));
  }
  size_ += n;
  return {};
}

Status PendingFile::write_at(int64_t offset, const void* bytes, int64_t n) {
  WEFT_CHECK(fd_ >= 0, temp_path_, " is closed");
  if (auto s = flush(); !s.ok()) return s;
  return write_all(static_cast<const char*>(bytes), static_cast<size_t>(n), offset);
}

Status PendingFile::read_at(int64_t offset, void* bytes, int64_t n) {
  WEFT_CHECK(fd_ >= 0, temp_path_, " is closed");
  if (auto s = flush(); !s.ok()) return s;
  if (read_fully(fd_, bytes, n, offset) != n)
    return Status::error(temp_path_ + ": read back failed: " + std::string(std::strerror(errno)));
  return {};
}

Status PendingFile::close() {
  if (fd_ < 0) return {};
  if (auto s = flush(); !s.ok()) return s;
  if (::fsync(fd_) != 0)
    return Status::error(temp_path_ + ": sync failed: " + std::string(std::strerror(errno)));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0)
    return Status::error(temp_path_ + ": close failed: " + std::string(std::strerror(errno)));
  return {};
}

Status PendingFile::commit() {
  if (auto s = close(); !s.ok()) return s;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return Status::error(path_ + ": cannot rename " + temp_path_ +
                         " into place: " + std::string(std::strerror(errno)));
  }
  committed_ = true;
  // the rename is durable only once the directory entry is
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  return fsync_path(dir.empty() ? "." : dir);
}

Status write_file_atomic(const std::string& path, std::string_view content) {
  auto file = PendingFile::create(path);
  if (!file.ok()) return file.status();
  PendingFile f = std::move(file).value();
  Status s = f.write(content.data(), static_cast<int64_t>(content.size()));
  if (s.ok()) s = f.commit();
  return s;
}

Status fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(path + ": cannot open to sync: " + std::strerror(errno));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Status::error(path + ": fsync failed: " + std::strerror(err));
  return {};
}

int write_fully(int fd, const void* bytes, int64_t n, int64_t offset) {
  const char* p = static_cast<const char*>(bytes);
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30));
    const ssize_t w = offset < 0 ? ::write(fd, p, want) : ::pwrite(fd, p, want, offset);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;
    p += w, n -= w;
    if (offset >= 0) offset += w;
  }
  return 0;
}

int64_t read_fully(int fd, void* bytes, int64_t n, int64_t offset) {
  char* p = static_cast<char*>(bytes);
  int64_t done = 0;
  while (done < n) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(n - done, int64_t{1} << 30));
    const ssize_t r = ::pread(fd, p + done, want, offset + done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += r;
  }
  return done;
}

}  // namespace weft
