#pragma once
// File plumbing shared by the dataset readers and writers: a read-only memory map, a file written
// under a temporary name and renamed into place only when complete, and the integer token types
// dataset files store (widened to int32 on read). Every error names the file.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "weft/core/status.h"

namespace weft::data {

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

// A file written as PATH.tmp-<pid> and renamed onto PATH by commit(), so that a reader never sees
// half a file and a failed run leaves PATH as it was (DESIGN.md §5: nothing a user owns is
// overwritten by a failed run). Destroyed uncommitted, it removes the temporary.
class PendingFile {
 public:
  static Result<PendingFile> create(const std::string& path);
  PendingFile(PendingFile&& other) noexcept;
  PendingFile& operator=(PendingFile&& other) noexcept;
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  ~PendingFile();

  // Appends through a buffer (large sequential writes are what a dataset is made of).
  Status write(const void* bytes, int64_t n);
  // Writes at an absolute offset, bypassing the buffer (flushes it first).
  Status write_at(int64_t offset, const void* bytes, int64_t n);
  // Reads back bytes already written (flushes the buffer first).
  Status read_at(int64_t offset, void* bytes, int64_t n);
  int64_t size() const { return size_; }
  // Flushes, syncs to disk and closes; the data is durable before any rename makes it visible.
  Status close();
  // Renames the closed temporary onto the final path.
  Status commit();
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  PendingFile() = default;
  Status flush();
  Status write_all(const char* p, size_t n);
  void discard();

  std::string path_, temp_path_;
  int fd_ = -1;
  int64_t size_ = 0;
  std::string buffer_;
  bool committed_ = false;
};

// Integer element types of token files: Megatron's integer DType codes plus llm.c's uint32.
enum class TokenType : uint8_t { U8, I8, I16, U16, I32, U32, I64 };

int64_t token_type_size(TokenType t);
std::string_view token_type_name(TokenType t);
int64_t token_type_max(TokenType t);  // the largest id the type holds

// Widens n tokens stored as `type` at src (unaligned, little-endian) into out. Returns the index of
// the first token outside [0, limit) (a corrupt or mismatched file), or -1 when all are inside.
int64_t widen_tokens(const std::byte* src, TokenType type, int64_t n, int32_t* out, int64_t limit);

// The token stored as `type` at p.
int64_t load_token(const std::byte* p, TokenType type);

// "No such file or directory" for the current errno.
std::string errno_text();

// Short human-readable counts: 1234 -> "1234", 1.2e6 -> "1.2M".
std::string human_count(int64_t n);

}  // namespace weft::data
