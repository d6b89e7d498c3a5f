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

Fd::~Fd() {
  if (fd >= 0) ::close(fd);
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  const Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};  // the mapping keeps the file alive
  if (file.fd < 0) return Status::error(path + ": cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) return Status::error(path + ": cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) return Status::error(path + ": not a regular file");
  MappedFile f;
  f.path_ = path;
  f.size_ = st.st_size;
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(f.size_), PROT_READ, MAP_PRIVATE, file.fd, 0);
    if (p == MAP_FAILED) return Status::error(path + ": cannot map: " + errno_text());
    f.data_ = static_cast<const std::byte*>(p);
  }
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  std::swap(path_, other.path_);  // other unmaps what this held
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), static_cast<size_t>(size_));
}

// ---- token types ----

namespace {
// f(T{}) with T the C++ type of `type`: each loop below is compiled once per type, so it
// vectorizes, and the switch over the types is written once.
template <typename F>
auto with_token_type(TokenType type, F&& f) {
  switch (type) {
    case TokenType::U8:
      return f(uint8_t{});
    case TokenType::I8:
      return f(int8_t{});
    case TokenType::I16:
      return f(int16_t{});
    case TokenType::U16:
      return f(uint16_t{});
    case TokenType::I32:
      return f(int32_t{});
    case TokenType::U32:
      return f(uint32_t{});
    case TokenType::I64:
      break;
  }
  return f(int64_t{});
}
}  // namespace

int64_t token_type_size(TokenType t) {
  return with_token_type(t, [](auto zero) { return int64_t{sizeof zero}; });
}

std::string_view token_type_name(TokenType t) {
  constexpr std::string_view kNames[] = {"uint8", "int8",   "int16", "uint16",
                                         "int32", "uint32", "int64"};  // in TokenType's order
  return kNames[static_cast<int>(t)];
}

int64_t token_type_max(TokenType t) {
  return with_token_type(t, [](auto zero) {
    return static_cast<int64_t>(std::numeric_limits<decltype(zero)>::max());
  });
}

std::pair<int64_t, int64_t> token_min_max(const std::byte* src, TokenType type, int64_t n) {
  return with_token_type(type, [&](auto zero) {
    using T = decltype(zero);
    T lo = load_at<T>(src), hi = lo;
    for (int64_t i = 1; i < n; ++i) {
      const T v = load_at<T>(src, i);
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    return std::pair<int64_t, int64_t>{static_cast<int64_t>(lo), static_cast<int64_t>(hi)};
  });
}

int64_t load_token(const std::byte* p, TokenType type) {
  return with_token_type(
      type, [&](auto zero) { return static_cast<int64_t>(load_at<decltype(zero)>(p)); });
}

int64_t widen_tokens(const std::byte* src, TokenType type, int64_t n, int32_t* out, int64_t limit) {
  return with_token_type(type, [&](auto zero) {
    int64_t bad = -1;
    for (int64_t i = 0; i < n; ++i) {
      const auto w = static_cast<int64_t>(load_at<decltype(zero)>(src, i));
      if ((w < 0 || w >= limit) && bad < 0) bad = i;
      out[i] = static_cast<int32_t>(w);
    }
    return bad;
  });
}

void narrow_tokens(const int32_t* src, int64_t n, TokenType type, std::byte* dst) {
  with_token_type(type, [&](auto zero) {
    for (int64_t i = 0; i < n; ++i) {
      const auto v = static_cast<decltype(zero)>(src[i]);
      std::memcpy(dst + i * int64_t{sizeof v}, &v, sizeof v);
    }
  });
}

}  // namespace weft::data
