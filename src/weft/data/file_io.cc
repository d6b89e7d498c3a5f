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
template <typename T>
std::pair<int64_t, int64_t> min_max(const std::byte* src, int64_t n) {
  T lo, hi;
  std::memcpy(&lo, src, sizeof(T));
  hi = lo;
  for (int64_t i = 1; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  return {static_cast<int64_t>(lo), static_cast<int64_t>(hi)};
}
}  // namespace

std::pair<int64_t, int64_t> token_min_max(const std::byte* src, TokenType type, int64_t n) {
  switch (type) {
    case TokenType::U8:
      return min_max<uint8_t>(src, n);
    case TokenType::I8:
      return min_max<int8_t>(src, n);
    case TokenType::I16:
      return min_max<int16_t>(src, n);
    case TokenType::U16:
      return min_max<uint16_t>(src, n);
    case TokenType::I32:
      return min_max<int32_t>(src, n);
    case TokenType::U32:
      return min_max<uint32_t>(src, n);
    case TokenType::I64:
      return min_max<int64_t>(src, n);
  }
  return {0, -1};
}

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
