#pragma once
// Durable, all-or-nothing file writes (DESIGN.md §5: nothing a user owns is overwritten by a failed
// run): a reader, or the next run after a crash, sees either the old file or the complete new one.
// Datasets, tokenizers, checkpoints, metrics and plots are all written through here.

#include <cstdint>
#include <string>
#include <string_view>

#include "weft/core/status.h"

namespace weft {

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

 private:
  PendingFile() = default;
  Status flush();
  Status write_all(const char* p, size_t n, int64_t offset = -1);
  void discard();

  std::string path_, temp_path_;
  int fd_ = -1;
  int64_t size_ = 0;
  std::string buffer_;
  bool committed_ = false;
};

// Writes `content` through a PendingFile: PATH.tmp-<pid>, fsynced, renamed onto PATH, directory
// fsynced. On failure the temporary is removed and PATH is left as it was. Errors name the file.
Status write_file_atomic(const std::string& path, std::string_view content);

// fsync() of a file or a directory (a rename is durable only once its directory is synced).
Status fsync_path(const std::string& path);

// Files written past the page cache (O_DIRECT: checkpoint shards) go to disk in whole blocks of
// kDirectBlockBytes, from addresses aligned alike, through a staging buffer of kDirectStageBytes
// where the source is not (checkpoint/checkpoint.cc).
inline constexpr int64_t kDirectBlockBytes = 4096;
inline constexpr int64_t kDirectStageBytes = int64_t{16} << 20;

// Writes all n bytes to fd, at the file's position (offset < 0) or at `offset`, through partial
// writes and EINTR. 0, or the errno of the write that failed.
int write_fully(int fd, const void* bytes, int64_t n, int64_t offset = -1);
// Reads n bytes of fd at `offset` into `bytes`, through partial reads and EINTR. The count read:
// less than n at the end of the file or on an error (errno says which).
int64_t read_fully(int fd, void* bytes, int64_t n, int64_t offset);

}  // namespace weft
