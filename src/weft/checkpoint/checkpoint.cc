#include "weft/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>

#include "weft/core/check.h"
#include "weft/core/fault.h"
#include "weft/core/pending_file.h"
#include "weft/core/text_file.h"

namespace weft::checkpoint {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// A shard file being written: floats go to disk and into the running checksum.
//
// Past the page cache (O_DIRECT) where the file system allows it. A buffered save of GPT-2 124M's
// 1.5 GB on the 2-core VM of the async benchmark cost 5-6 CPU-seconds (copies into the page cache,
// its writeback) and 6-7 s; O_DIRECT, 0.3-0.55 CPU-seconds and 1.75-3 s (64 and 2 MiB blocks). That
// CPU is what a background save takes from training. O_DIRECT wants the address, size and offset of
// each write aligned to the device's blocks. Where the source's address and the file's position
// are aligned alike (consecutive pieces of one aligned buffer, as an asynchronous save's snapshot
// is laid out) whole blocks go to disk straight from the source; the rest through an aligned
// staging buffer, written in whole blocks; the last one is padded and the file truncated to its
// size. A file system that refuses O_DIRECT (tmpfs), at open or at the first write, gets buffered
// writes.
class ShardWriter {
 public:
  static constexpr int64_t kAlign = kDirectBlockBytes;
  static constexpr int64_t kStage = kDirectStageBytes;

  ~ShardWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (state_ != nullptr) XXH3_freeState(state_);
    std::free(stage_);
  }
  Status open(const std::string& path) {
    path_ = path;
    constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
    fd_ = ::open(path.c_str(), kFlags | O_DIRECT, 0644);
    direct_ = fd_ >= 0;
    if (!direct_ && errno == EINVAL) fd_ = ::open(path.c_str(), kFlags, 0644);
    if (fd_ < 0) return Status::error(fmt::format("{}: cannot create: {}", path, strerror(errno)));
    stage_ = static_cast<char*>(std::aligned_alloc(kAlign, kStage));
    WEFT_CHECK(stage_ != nullptr, "cannot allocate ", kStage, " bytes to stage ", path);
    state_ = XXH3_createState();
    XXH3_64bits_reset(state_);
    return {};
  }
  // Appends n floats, each of which must be finite (a rank's corrupt state must not become the
  // last good checkpoint): the first that is not, with nothing of the call written, or null. The
  // check and the checksum take a cache-sized block at a time, so that memory is read once for
  // both.
  Result<const float*> write(const float* data, int64_t n) {
    constexpr int64_t kBlock = 16384;  // floats: 64 KiB, in L2 between the scan and the hash
    for (int64_t at = 0; at < n; at += kBlock) {
      const int64_t k = std::min(kBlock, n - at);
      if (const float* bad = first_non_finite(data + at, k)) return bad;
      XXH3_64bits_update(state_, data + at, static_cast<size_t>(k) * sizeof(float));
    }
    Status s = write_bytes(reinterpret_cast<const char*>(data), n * int64_t{sizeof(float)});
    if (!s.ok()) return s;
    return static_cast<const float*>(nullptr);
  }
  Result<ShardInfo> finish() {
    if (staged_ > 0) {
      const int64_t padded = (staged_ + kAlign - 1) / kAlign * kAlign;
      std::memset(stage_ + staged_, 0, static_cast<size_t>(padded - staged_));
      Status s = flush(padded);
      if (!s.ok()) return s;
      if (::ftruncate(fd_, bytes_) != 0) {
        return Status::error(fmt::format("{}: truncate failed: {}", path_, strerror(errno)));
      }
    }
    if (::fsync(fd_) != 0) {
      return Status::error(fmt::format("{}: fsync failed: {}", path_, strerror(errno)));
    }
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return Status::error(fmt::format("{}: close failed: {}", path_, strerror(errno)));
    return ShardInfo{fs::path(path_).filename().string(), bytes_, XXH3_64bits_digest(state_)};
  }
  int64_t bytes() const { return bytes_; }

 private:
  Status write_bytes(const char* p, int64_t n) {
    bytes_ += n;
    while (n > 0) {
      // In phase: `p` sits at the same offset within a block as the file's end (written_ is
      // whole blocks, staged_ the partial one), so once the stage holds whole blocks, `p` is
      // aligned.
      const bool in_phase = (reinterpret_cast<uintptr_t>(p) - staged_) % kAlign == 0;
      if (in_phase && staged_ % kAlign == 0 && n >= kAlign) {
        if (Status s = flush(staged_); !s.ok()) return s;
        const int64_t whole = n / kAlign * kAlign;
        if (Status s = put(p, whole); !s.ok()) return s;
        p += whole;
        n -= whole;
        continue;
      }
      int64_t take = std::min(n, kStage - staged_);
      if (in_phase) take = std::min(take, kAlign - staged_ % kAlign);  // up to the seam
      std::memcpy(stage_ + staged_, p, static_cast<size_t>(take));
      staged_ += take;
      p += take;
      n -= take;
      if (staged_ == kStage) {
        if (Status s = flush(kStage); !s.ok()) return s;
      }
    }
    return {};
  }
  // The stage's first n bytes (whole blocks, or its padded end) to the file.
  Status flush(int64_t n) {
    if (n == 0) return {};
    Status s = put(stage_, n);
    staged_ = 0;
    return s;
  }
  Status put(const char* p, int64_t n) {
    int err = write_fully(fd_, p, n, written_);
    if (err == EINVAL && direct_) {  // O_DIRECT taken at open, refused at the write
      direct_ = false;
      if (::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT) == 0) {
        err = write_fully(fd_, p, n, written_);
      }
    }
    if (err != 0) return Status::error(fmt::format("{}: write failed: {}", path_, strerror(err)));
    written_ += n;
    return {};
  }

  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  char* stage_ = nullptr;  // [kStage], kAlign-aligned
  int64_t staged_ = 0;     // bytes in stage_, after the written_ ones
  int64_t written_ = 0;    // bytes in the file (whole blocks until finish())
  XXH3_state_t* state_ = nullptr;
  int64_t bytes_ = 0;  // the file's size: what write() was given
};

// Opens the file and checks its size against the metadata; -1 and the problem when not.
int open_shard(const std::string& path, const ShardInfo& sh, Status& problem) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    problem =
        Status::error(fmt::format("{}: cannot open checkpoint shard: {}", path, strerror(errno)));
    return -1;
  }
  struct stat st {};
  ::fstat(fd, &st);
  if (st.st_size != sh.bytes) {
    ::close(fd);
    problem = Status::error(fmt::format(
        "{}: checkpoint shard is {} bytes, the metadata says {} (truncated or overwritten)", path,
        static_cast<int64_t>(st.st_size), sh.bytes));
    return -1;
  }
  return fd;
}

bool parse_step_dir(const std::string& name, int64_t& step) {
  if (!name.starts_with("step_") || name.size() < 6) return false;
  step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    step = step * 10 + (name[i] - '0');
  }
  return true;
}

// kill(pid, 0) fails with ESRCH when no such process exists; any other answer means it may, unless
// /proc says it is a zombie: dead, not yet reaped (a rank mpirun killed whose parent is gone, until
// init reaps it, which some containers' init never does).
bool process_runs(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t name_end = line.rfind(')');  // "pid (comm) S ...": comm may hold spaces
  return name_end == std::string::npos || name_end + 2 >= line.size() || line[name_end + 2] != 'Z';
}

}  // namespace

// Streams the file through XXH3 and checks its size and checksum against the metadata.
Status verify_shard(const std::string& dir, const ShardInfo& sh) {
  const std::string path = join(dir, sh.file);
  Status opened;
  const int fd = open_shard(path, sh, opened);
  if (fd < 0) return opened;
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> chunk(8 << 20);
  std::string problem;
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) problem = fmt::format("{}: read failed: {}", path, strerror(errno));
    if (n <= 0) break;
    XXH3_64bits_update(state, chunk.data(), static_cast<size_t>(n));
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  ::close(fd);
  if (!problem.empty()) return Status::error(problem);
  if (digest != sh.xxh3) {
    return Status::error(
        fmt::format("{}: checkpoint shard is corrupt (XXH3 checksum {} does not match {} in {})",
                    path, hex64(digest), hex64(sh.xxh3), kMetadataFile));
  }
  return {};
}

Status check_shard_size(const std::string& dir, const ShardInfo& shard) {
  Status problem;
  const int fd = open_shard(join(dir, shard.file), shard, problem);
  if (fd >= 0) ::close(fd);
  return problem;
}

std::string step_dir_name(int64_t step) { return fmt::format("step_{:08d}", step); }

Result<std::vector<std::string>> prepare_root(const std::string& root, bool clean) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root)) {
    return Status::error(fmt::format("{}: cannot create the checkpoint directory: {}", root,
                                     ec ? ec.message() : "a file of that name is in the way"));
  }
  if (::access(root.c_str(), W_OK | X_OK) != 0) {
    return Status::error(
        fmt::format("{}: the checkpoint directory is not writable: {}", root, strerror(errno)));
  }
  std::vector<std::string> removed;
  if (!clean) return removed;
  Status busy;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.find(".tmp-");
    if (!e.is_directory() || name.rfind("step_", 0) != 0 || at == std::string::npos) continue;
    long pid = 0;
    try {
      pid = std::stol(name.substr(at + 5));
    } catch (const std::exception&) {
      continue;  // not one of ours
    }
    if (pid > 0 && pid != ::getpid() && process_runs(static_cast<pid_t>(pid))) {
      busy.add(
          fmt::format("{}: a save in progress by process {}, which still runs: is another "
                      "run writing into {}?",
                      e.path().string(), pid, root));
      continue;
    }
    fs::remove_all(e.path(), ec);
    if (ec) {
      busy.add(fmt::format("{}: cannot remove this leftover of a killed save: {}",
                           e.path().string(), ec.message()));
      continue;
    }
    removed.push_back(e.path().string());
  }
  if (!busy.ok()) return busy;
  return removed;
}

Result<std::string> begin_save(const std::string& root, int64_t step, int64_t token) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) {
    return Status::error(
        fmt::format("{}: cannot create checkpoint directory: {}", root, ec.message()));
  }
  const std::string tmp_dir = fmt::format("{}.tmp-{}", join(root, step_dir_name(step)), token);
  fs::remove_all(tmp_dir, ec);  // a leftover of a process that died with this token
  if (::mkdir(tmp_dir.c_str(), 0755) != 0) {
    return Status::error(fmt::format("{}: cannot create: {}", tmp_dir, strerror(errno)));
  }
  return tmp_dir;
}

const float* first_non_finite(const float* p, int64_t n) {
  // An all-ones exponent. The branch-free OR vectorizes where std::find_if's early exit does not:
  // it reads memory at twice find_if's rate, and a background save's scan of 1.5 GB takes CPU
  // from training.
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) {
    any |= static_cast<uint32_t>((std::bit_cast<uint32_t>(p[i]) & 0x7f800000u) == 0x7f800000u);
  }
  if (any == 0) return nullptr;
  return std::find_if(p, p + n, [](float x) { return !std::isfinite(x); });
}

RankFileNames rank_file_names(int zero, int tp_rank, int dp_rank, int pp_rank) {
  return {zero == 0 ? fmt::format("model-tp{}-pp{}.bin", tp_rank, pp_rank)
                    : fmt::format("model-tp{}-dp{}-pp{}.bin", tp_rank, dp_rank, pp_rank),
          fmt::format("optim-tp{}-dp{}-pp{}.bin", tp_rank, dp_rank, pp_rank)};
}

Result<RankFiles> write_rank_files(const std::string& tmp_dir, const RankFileNames& files,
                                   std::span<const WritePiece> pieces, std::span<float> staging) {
  RankFiles out;
  // Parameters into the model file; the moments, m before v, into the optimizer file.
  const std::pair<const std::string*, std::vector<const char*>> plan[] = {
      {&files.model, {"params"}}, {&files.optim, {"adam_m", "adam_v"}}};
  for (const auto& [file, groups] : plan) {
    std::unique_ptr<ShardWriter> w;
    for (const char* group : groups) {
      for (const WritePiece& p : pieces) {
        if (p.tensor.group != group) continue;
        if (w == nullptr) {
          w = std::make_unique<ShardWriter>();
          Status s = w->open(join(tmp_dir, *file));
          if (!s.ok()) return s;
        }
        TensorInfo t = p.tensor;
        t.file = *file;
        t.offset = w->bytes();
        // In host memory: straight from the buffer. Elsewhere: a window of `staging` at a time.
        WEFT_CHECK(p.data != nullptr || (p.fetch && !staging.empty()), "piece ", p.tensor.name,
                   " (", p.tensor.group,
                   ") has neither host data nor a fetch and a staging buffer");
        const int64_t window = p.data != nullptr ? std::max<int64_t>(p.tensor.count, 1)
                                                 : static_cast<int64_t>(staging.size());
        for (int64_t at = 0; at < p.tensor.count; at += window) {
          const int64_t n = std::min(window, p.tensor.count - at);
          const float* data = p.data != nullptr ? p.data + at : staging.data();
          if (p.data == nullptr) p.fetch(at, n, staging.data());
          auto bad = w->write(data, n);
          if (!bad.ok()) return bad.status();
          if (bad.value() != nullptr) {
            return Status::error(fmt::format(
                "{}: non-finite value {} in tensor {} ({}), element {} of this rank's part; the "
                "checkpoint is not written",
                join(tmp_dir, *file), *bad.value(), p.tensor.name, p.tensor.group,
                p.tensor.begin + at + (bad.value() - data)));
          }
        }
        out.tensors.push_back(std::move(t));
      }
    }
    if (w != nullptr) {
      auto info = w->finish();
      if (!info.ok()) return info.status();
      out.shards.push_back(info.value());
    }
  }
  return out;
}

void abort_save(const std::string& tmp_dir) {
  std::error_code ignored;
  fs::remove_all(tmp_dir, ignored);
}

Result<std::string> commit_save(const std::string& root, const std::string& tmp_dir,
                                const Metadata& m, int keep_last) {
  const std::string name = step_dir_name(m.train.step);
  const std::string final_dir = join(root, name);
  auto fail = [&](const Status& s) -> Result<std::string> {
    abort_save(tmp_dir);
    return s;
  };
  Status s = write_file_atomic(join(tmp_dir, kMetadataFile), metadata_to_json(m).dump(1) + "\n");
  if (s.ok()) s = fsync_path(tmp_dir);
  if (!s.ok()) return fail(s);

  // Saving a step that is already there (a resumed run stopped at once) replaces it; the old copy
  // is moved aside first because rename() cannot replace a non-empty directory.
  std::error_code ec;
  std::string old_dir;
  if (fs::exists(final_dir)) {
    old_dir = fmt::format("{}.old-{}", final_dir, ::getpid());
    fs::remove_all(old_dir, ec);
    if (std::rename(final_dir.c_str(), old_dir.c_str()) != 0) {
      return fail(
          Status::error(fmt::format("{}: cannot move aside: {}", final_dir, strerror(errno))));
    }
  }
  if (std::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) {
    Status err = Status::error(
        fmt::format("{}: cannot rename {} into place: {}", final_dir, tmp_dir, strerror(errno)));
    if (!old_dir.empty()) std::rename(old_dir.c_str(), final_dir.c_str());
    return fail(err);
  }
  if (!old_dir.empty()) fs::remove_all(old_dir, ec);
  s = fsync_path(root);
  if (s.ok()) s = write_file_atomic(join(root, kLatestFile), name + "\n");
  if (!s.ok()) return s;

  if (keep_last > 0) {
    auto all = list_checkpoints(root);
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i) {
      if (all[i].second != final_dir) fs::remove_all(all[i].second, ec);
    }
  }
  return final_dir;
}

namespace {

// A buffer's slices as whole tensors (one process holding the whole model).
template <typename Piece, typename Ptr>
void whole_pieces(const FlatBuffer& buf, const char* group, Ptr base, std::vector<Piece>& out) {
  for (const auto& sl : buf.layout().slices()) {
    Piece p;
    p.tensor.name = sl.name;
    p.tensor.group = group;
    p.tensor.global_shape = sl.shape;
    p.tensor.count = sl.numel;
    p.data = base + sl.offset;
    out.push_back(std::move(p));
  }
}

}  // namespace

Result<std::string> save(const std::string& root, const model::GptConfig& cfg,
                         const FlatBuffer& params, const optim::AdamW* opt, const TrainState& state,
                         int keep_last) {
  std::vector<WritePiece> pieces;
  whole_pieces(params, "params", params.data(), pieces);
  Metadata m;
  m.model = cfg;
  m.train = state;
  if (opt != nullptr) {
    whole_pieces(opt->m(), "adam_m", opt->m().data(), pieces);
    whole_pieces(opt->v(), "adam_v", opt->v().data(), pieces);
    m.has_optimizer = true;
    m.adamw = opt->config();
    m.optimizer_step = opt->step_count();
  }
  auto tmp = begin_save(root, state.step, ::getpid());
  if (!tmp.ok()) return tmp.status();
  auto files = write_rank_files(tmp.value(), rank_file_names(0, 0, 0, 0), pieces);
  if (!files.ok()) {
    abort_save(tmp.value());
    return files.status();
  }
  fault_point("save", state.step);  // crash tests: the shards written, the checkpoint incomplete
  m.shards = std::move(files.value().shards);
  m.tensors = std::move(files.value().tensors);
  return commit_save(root, tmp.value(), m, keep_last);
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    int64_t step = 0;
    if (e.is_directory() && parse_step_dir(e.path().filename().string(), step) &&
        fs::exists(e.path() / kMetadataFile)) {
      out.emplace_back(step, e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status check_new_root(const std::string& root, const std::string& what) {
  auto latest = find_latest(root);
  if (list_checkpoints(root).empty() && latest.ok() && !latest.value().has_value()) return {};
  return Status::error(fmt::format(
      "{}: already holds checkpoints; {} into a new directory (writing here would repoint its "
      "`latest` or replace its checkpoint of the same step)",
      root, what));
}

Result<std::optional<std::string>> find_latest(const std::string& root) {
  const std::string pointer = join(root, kLatestFile);
  std::ifstream f(pointer);
  if (!f) return std::optional<std::string>{};
  std::string name;
  std::getline(f, name);
  int64_t step = 0;
  if (!parse_step_dir(name, step)) {
    return Status::error(fmt::format("{}: does not name a checkpoint ('{}')", pointer, name));
  }
  const std::string dir = join(root, name);
  if (!fs::exists(fs::path(dir) / kMetadataFile)) {
    return Status::error(fmt::format("{}: names {}, which is missing", pointer, dir));
  }
  return std::optional<std::string>{dir};
}

Result<std::string> resolve(const std::string& path) {
  if (fs::exists(fs::path(path) / kMetadataFile)) return path;
  auto latest = find_latest(path);
  if (!latest.ok()) return latest.status();
  if (!latest.value()) {
    return Status::error(fmt::format("{}: not a checkpoint (no {}) and no '{}' pointer to one",
                                     path, kMetadataFile, kLatestFile));
  }
  return *latest.value();
}

Result<Metadata> read_metadata(const std::string& dir) {
  const std::string path = join(dir, kMetadataFile);
  const auto text = read_text_file(path);
  if (!text) return Status::error(fmt::format("{}: cannot open checkpoint metadata", path));
  return parse_metadata(*text, path);
}

Status load(const std::string& dir, const model::GptConfig& expected, FlatBuffer& params,
            optim::AdamW* opt, TrainState* state) {
  auto md = read_metadata(dir);
  if (!md.ok()) return md.status();
  const Metadata& m = md.value();
  if (opt != nullptr && !m.has_optimizer) {
    return Status::error(fmt::format("{}: the checkpoint has no optimizer state to resume from",
                                     join(dir, kMetadataFile)));
  }
  std::vector<ReadPiece> targets;
  whole_pieces(params, "params", params.data(), targets);
  if (opt != nullptr) {
    whole_pieces(opt->m(), "adam_m", opt->m().data(), targets);
    whole_pieces(opt->v(), "adam_v", opt->v().data(), targets);
  }
  Status s = load_pieces(dir, m, expected, targets);
  if (!s.ok()) return s;
  if (opt != nullptr) opt->set_step_count(static_cast<int>(m.optimizer_step));
  if (state != nullptr) *state = m.train;
  return {};
}

}  // namespace weft::checkpoint
