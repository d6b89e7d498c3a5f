#include "weft/data/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

namespace weft::data {

std::string errno_text() { return std::strerror(errno); }

std::string human_count(int64_t n) {
  char buf[32];
  if (n < 10000) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  } else if (n < 10'000'000) {
    std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  } else if (n < 10'000'000'000) {
    std::snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fB", n / 1e9);
  }
  return buf;
}

// ---- MappedFile ----

Result<MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(path + ": cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string e = errno_text();
    ::close(fd);
    return Status::error(path + ": cannot stat: " + e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error(path + ": not a regular file");
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = st.st_size;
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(f.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string e = errno_text();
      ::close(fd);
      return Status::error(path + ": cannot map: " + e);
    }
    f.data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<std::byte*>(data_), static_cast<size_t>(size_));
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), static_cast<size_t>(size_));
}

// ---- PendingFile ----

namespace {
constexpr size_t kWriteBuffer = 1 << 20;
}

Result<PendingFile> PendingFile::create(const std::string& path) {
  PendingFile f;
  f.path_ = path;
  f.temp_path_ = path + ".tmp-" + std::to_string(::getpid());
  f.fd_ = ::open(f.temp_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd_ < 0) return Status::error(f.temp_path_ + ": cannot create: " + errno_text());
  f.buffer_.reserve(kWriteBuffer);
  return f;
}

PendingFile::PendingFile(PendingFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      buffer_(std::move(other.buffer_)),
      committed_(std::exchange(other.committed_, true)) {}

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

Status PendingFile::write_all(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::error(temp_path_ + ": write failed: " + errno_text());
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return {};
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
  const char* p = static_cast<const char*>(bytes);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, static_cast<size_t>(n), offset);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::error(temp_path_ + ": write failed: " + errno_text());
    }
    p += w, offset += w, n -= w;
  }
  return {};
}

Status PendingFile::read_at(int64_t offset, void* bytes, int64_t n) {
  WEFT_CHECK(fd_ >= 0, temp_path_, " is closed");
  if (auto s = flush(); !s.ok()) return s;
  char* p = static_cast<char*>(bytes);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, static_cast<size_t>(n), offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Status::error(temp_path_ + ": read back failed: " + errno_text());
    p += r, offset += r, n -= r;
  }
  return {};
}

Status PendingFile::close() {
  if (fd_ < 0) return {};
  if (auto s = flush(); !s.ok()) return s;
  if (::fsync(fd_) != 0) return Status::error(temp_path_ + ": sync failed: " + errno_text());
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return Status::error(temp_path_ + ": close failed: " + errno_text());
  return {};
}

Status PendingFile::commit() {
  if (auto s = close(); !s.ok()) return s;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return Status::error(path_ + ": cannot rename " + temp_path_ + " into place: " + errno_text());
  }
  committed_ = true;
  return {};
}

// ---- token types ----

int64_t token_type_size(TokenType t) {
  switch (t) {
    case TokenType::U8:
    case TokenType::I8:
      return 1;
    case TokenType::I16:
    case TokenType::U16:
      return 2;
    case TokenType::I32:
    case TokenType::U32:
      return 4;
    case TokenType::I64:
      return 8;
  }
  return 0;
}

std::string_view token_type_name(TokenType t) {
  switch (t) {
    case TokenType::U8:
      return "uint8";
    case TokenType::I8:
      return "int8";
    case TokenType::I16:
      return "int16";
    case TokenType::U16:
      return "uint16";
    case TokenType::I32:
      return "int32";
    case TokenType::U32:
      return "uint32";
    case TokenType::I64:
      return "int64";
  }
  return "?";
}

int64_t token_type_max(TokenType t) {
  switch (t) {
    case TokenType::U8:
      return std::numeric_limits<uint8_t>::max();
    case TokenType::I8:
      return std::numeric_limits<int8_t>::max();
    case TokenType::I16:
      return std::numeric_limits<int16_t>::max();
    case TokenType::U16:
      return std::numeric_limits<uint16_t>::max();
    case TokenType::I32:
      return std::numeric_limits<int32_t>::max();
    case TokenType::U32:
      return std::numeric_limits<uint32_t>::max();
    case TokenType::I64:
      return std::numeric_limits<int64_t>::max();
  }
  return 0;
}

namespace {
// The files are little-endian, as is every machine weft runs on (x86-64, aarch64); memcpy makes the
// unaligned loads legal (Megatron's .idx puts int32 arrays at byte 34).
template <typename T>
int64_t widen(const std::byte* src, int64_t n, int32_t* out, int64_t limit) {
  int64_t bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    const auto w = static_cast<int64_t>(v);
    if ((w < 0 || w >= limit) && bad < 0) bad = i;
    out[i] = static_cast<int32_t>(w);
  }
  return bad;
}
}  // namespace

int64_t load_token(const std::byte* p, TokenType type) {
  int32_t ignored = 0;
  switch (type) {
    case TokenType::U32: {
      uint32_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case TokenType::I64: {
      int64_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    default:
      widen_tokens(p, type, 1, &ignored, 0);
      return ignored;
  }
}

int64_t widen_tokens(const std::byte* src, TokenType type, int64_t n, int32_t* out, int64_t limit) {
  switch (type) {
    case TokenType::U8:
      return widen<uint8_t>(src, n, out, limit);
    case TokenType::I8:
      return widen<int8_t>(src, n, out, limit);
    case TokenType::I16:
      return widen<int16_t>(src, n, out, limit);
    case TokenType::U16:
      return widen<uint16_t>(src, n, out, limit);
    case TokenType::I32:
      return widen<int32_t>(src, n, out, limit);
    case TokenType::U32:
      return widen<uint32_t>(src, n, out, limit);
    case TokenType::I64:
      return widen<int64_t>(src, n, out, limit);
  }
  return -1;
}

}  // namespace weft::data
