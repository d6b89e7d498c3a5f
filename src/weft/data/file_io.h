#pragma once
// File plumbing shared by the dataset readers and writers: a read-only memory map and the integer
// token types dataset files store (widened to int32 on read); outputs are written through
// weft::PendingFile (core/pending_file.h). Every error names the file.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "weft/core/pending_file.h"
#include "weft/core/status.h"

namespace weft::data {

// Closes a file descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd();
};

// A whole file mapped read-only. An empty file maps to no pages (data() is null, size() 0).
class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const std::byte* data_ = nullptr;
  int64_t size_ = 0;
};

// Integer element types of token files: Megatron's integer DType codes plus llm.c's uint32.
enum class TokenType : uint8_t { U8, I8, I16, U16, I32, U32, I64 };

int64_t token_type_size(TokenType t);
std::string_view token_type_name(TokenType t);
int64_t token_type_max(TokenType t);  // the largest id the type holds

// Widens n tokens stored as `type` at src (unaligned, little-endian) into out. Returns the index of
// the first token outside [0, limit) (a corrupt or mismatched file), or -1 when all are inside.
int64_t widen_tokens(const std::byte* src, TokenType type, int64_t n, int32_t* out, int64_t limit);
// widen_tokens' inverse: stores n tokens, each within the range of `type`, at dst.
void narrow_tokens(const int32_t* src, int64_t n, TokenType type, std::byte* dst);

// The least and the largest of n tokens stored as `type` at src (n > 0): the loop the id scan of
// data/token_scan.h runs, one type at a time so that it vectorizes.
std::pair<int64_t, int64_t> token_min_max(const std::byte* src, TokenType type, int64_t n);

// The token stored as `type` at p.
int64_t load_token(const std::byte* p, TokenType type);

// Element i of an array of T at p. The files are little-endian, as is every machine weft runs on
// (x86-64, aarch64); memcpy makes the unaligned loads legal (Megatron's .idx puts int32 arrays at
// byte 34).
template <typename T>
T load_at(const std::byte* p, int64_t i = 0) {
  T v;
  std::memcpy(&v, p + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// "No such file or directory" for the current errno.
std::string errno_text();

// Short human-readable counts: 1234 -> "1234", 1.2e6 -> "1.2M".
std::string human_count(int64_t n);

}  // namespace weft::data
