#include "weft/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

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

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

std::string shard_name(const char* kind, const ParallelLayout& p) {
  // Parameters are the same on every dp rank (without ZeRO-3), so their shards are named by
  // (tp, pp) only; optimizer state may be partitioned over dp, so its shards carry dp too.
  if (std::string_view(kind) == "model")
    return fmt::format("model-tp{}-pp{}.bin", p.tp_rank, p.pp_rank);
  return fmt::format("optim-tp{}-dp{}-pp{}.bin", p.tp_rank, p.dp_rank, p.pp_rank);
}

// A shard file being written: bytes go to disk and into the running checksum.
class ShardWriter {
 public:
  ~ShardWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (state_ != nullptr) XXH3_freeState(state_);
  }
  Status open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::error(fmt::format("{}: cannot create: {}", path, strerror(errno)));
    state_ = XXH3_createState();
    XXH3_64bits_reset(state_);
    return {};
  }
  Status write(const void* data, int64_t n) {
    XXH3_64bits_update(state_, data, static_cast<size_t>(n));
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, static_cast<size_t>(std::min<int64_t>(n, 1 << 30)));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return Status::error(fmt::format("{}: write failed: {}", path_, strerror(errno)));
      p += w;
      n -= w;
      bytes_ += w;
    }
    return {};
  }
  Result<ShardInfo> finish() {
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
  std::string path_;
  int fd_ = -1;
  XXH3_state_t* state_ = nullptr;
  int64_t bytes_ = 0;
};

// Writes every slice of `buf` (without alignment padding) and records where each went.
Status write_group(ShardWriter& w, const FlatBuffer& buf, const char* group,
                   const std::string& file, std::vector<TensorInfo>& tensors) {
  for (const auto& s : buf.layout().slices()) {
    TensorInfo t;
    t.name = s.name;
    t.group = group;
    t.global_shape = s.shape;
    t.start = Shape(s.shape.size(), 0);
    t.shape = s.shape;
    t.file = file;
    t.offset = w.bytes();
    tensors.push_back(t);
    Status st = w.write(buf.data() + s.offset, s.numel * int64_t{sizeof(float)});
    if (!st.ok()) return st;
  }
  return {};
}

// Streams the file through XXH3 and checks its size and checksum against the metadata.
Status verify_shard_file(const std::string& dir, const ShardInfo& sh) {
  const std::string path = join(dir, sh.file);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error(
        fmt::format("{}: cannot open checkpoint shard: {}", path, strerror(errno)));
  struct stat st {};
  ::fstat(fd, &st);
  if (st.st_size != sh.bytes) {
    ::close(fd);
    return Status::error(fmt::format(
        "{}: checkpoint shard is {} bytes, the metadata says {} (truncated or overwritten)", path,
        static_cast<int64_t>(st.st_size), sh.bytes));
  }
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

Status read_tensor(const std::string& dir, const TensorInfo& t, float* out) {
  const std::string path = join(dir, t.file);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(fmt::format("{}: cannot open: {}", path, strerror(errno)));
  char* p = reinterpret_cast<char*>(out);
  int64_t left = numel(t.shape) * int64_t{sizeof(float)}, off = t.offset;
  std::string problem;
  while (left > 0) {
    const ssize_t n = ::pread(fd, p, static_cast<size_t>(std::min<int64_t>(left, 1 << 30)), off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      problem = fmt::format("{}: short read of tensor {}", path, t.name);
      break;
    }
    p += n;
    off += n;
    left -= n;
  }
  ::close(fd);
  if (!problem.empty()) return Status::error(problem);
  return {};
}

std::string config_diff(const model::GptConfig& a, const model::GptConfig& b) {
  std::vector<std::string> d;
  auto cmp = [&](const char* key, int x, int y) {
    if (x != y) d.push_back(fmt::format("{} {} vs {}", key, x, y));
  };
  cmp("n_layer", a.n_layer, b.n_layer);
  cmp("n_embd", a.n_embd, b.n_embd);
  cmp("n_head", a.n_head, b.n_head);
  cmp("vocab_size", a.vocab_size, b.vocab_size);
  cmp("pad_vocab_to", a.pad_vocab_to, b.pad_vocab_to);
  cmp("max_seq_len", a.max_seq_len, b.max_seq_len);
  return fmt::format("{}", fmt::join(d, ", "));
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

}  // namespace

Status verify_shard(const std::string& dir, const ShardInfo& shard) {
  return verify_shard_file(dir, shard);
}

std::string step_dir_name(int64_t step) { return fmt::format("step_{:08d}", step); }

Result<std::string> save(const std::string& root, const model::GptConfig& cfg,
                         const FlatBuffer& params, const optim::AdamW* opt, const TrainState& state,
                         int keep_last) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec)
    return Status::error(
        fmt::format("{}: cannot create checkpoint directory: {}", root, ec.message()));
  const std::string name = step_dir_name(state.step);
  const std::string final_dir = join(root, name);
  const std::string tmp_dir = fmt::format("{}.tmp-{}", final_dir, ::getpid());
  fs::remove_all(tmp_dir, ec);  // a leftover of this very process
  if (::mkdir(tmp_dir.c_str(), 0755) != 0) {
    return Status::error(fmt::format("{}: cannot create: {}", tmp_dir, strerror(errno)));
  }
  auto fail = [&](const Status& s) -> Result<std::string> {
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);
    return s;
  };

  Metadata m;
  m.model = cfg;
  m.train = state;
  const std::string model_file = shard_name("model", m.parallel);
  {
    ShardWriter w;
    Status s = w.open(join(tmp_dir, model_file));
    if (s.ok()) s = write_group(w, params, "params", model_file, m.tensors);
    if (!s.ok()) return fail(s);
    auto info = w.finish();
    if (!info.ok()) return fail(info.status());
    m.shards.push_back(info.value());
  }
  fault_point("save", state.step);  // crash tests: one shard written, the checkpoint incomplete
  if (opt != nullptr) {
    m.has_optimizer = true;
    m.adamw = opt->config();
    m.optimizer_step = opt->step_count();
    const std::string optim_file = shard_name("optim", m.parallel);
    ShardWriter w;
    Status s = w.open(join(tmp_dir, optim_file));
    if (s.ok()) s = write_group(w, opt->m(), "adam_m", optim_file, m.tensors);
    if (s.ok()) s = write_group(w, opt->v(), "adam_v", optim_file, m.tensors);
    if (!s.ok()) return fail(s);
    auto info = w.finish();
    if (!info.ok()) return fail(info.status());
    m.shards.push_back(info.value());
  }
  Status s = write_file_atomic(join(tmp_dir, kMetadataFile), metadata_to_json(m).dump(1) + "\n");
  if (s.ok()) s = fsync_path(tmp_dir);
  if (!s.ok()) return fail(s);

  // Saving a step that is already there (a resumed run stopped at once) replaces it; the old copy
  // is moved aside first because rename() cannot replace a non-empty directory.
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
  const std::string origin = join(dir, kMetadataFile);
  const std::string diff = config_diff(m.model, expected);
  if (!diff.empty()) {
    return Status::error(fmt::format(
        "{}: the checkpoint holds another model: '{}' vs this run's '{}' ({}; checkpoint vs run)",
        origin, m.model.name, expected.name, diff));
  }
  if (m.parallel.tp != 1 || m.parallel.pp != 1 || m.parallel.dp != 1) {
    return Status::error(fmt::format(
        "{}: written with tp={} pp={} dp={}; loading a sharded checkpoint is not yet supported "
        "in this build",
        origin, m.parallel.tp, m.parallel.pp, m.parallel.dp));
  }
  if (opt != nullptr && !m.has_optimizer) {
    return Status::error(
        fmt::format("{}: the checkpoint has no optimizer state to resume from", origin));
  }

  // Match every slice of the buffers to be filled with a tensor of the checkpoint.
  std::map<std::pair<std::string, std::string>, const TensorInfo*> by_name;
  for (const auto& t : m.tensors) by_name[{t.group, t.name}] = &t;
  struct Target {
    const TensorInfo* tensor;
    float* dst;
  };
  std::vector<Target> targets;
  Status s;
  auto match = [&](FlatBuffer& buf, const char* group) {
    for (const auto& sl : buf.layout().slices()) {
      auto it = by_name.find({group, sl.name});
      if (it == by_name.end()) {
        s.add(fmt::format("{}: tensor {} ({}) is missing", origin, sl.name, group));
      } else if (it->second->global_shape != sl.shape || it->second->shape != sl.shape) {
        s.add(fmt::format("{}: tensor {} ({}) has shape {}, the model expects {}", origin, sl.name,
                          group, shape_str(it->second->shape), shape_str(sl.shape)));
      } else {
        targets.push_back({it->second, buf.data() + sl.offset});
      }
    }
  };
  match(params, "params");
  if (opt != nullptr) {
    match(opt->m(), "adam_m");
    match(opt->v(), "adam_v");
  }
  if (!s.ok()) return s;
  // Only the shards read from are verified: loading weights for inference skips optimizer state.
  std::set<std::string> needed;
  for (const auto& t : targets) needed.insert(t.tensor->file);
  for (const auto& sh : m.shards) {
    if (needed.count(sh.file) == 0) continue;
    Status v = verify_shard_file(dir, sh);
    if (!v.ok()) return v;
  }
  // Everything checked: only now are the caller's buffers written.
  for (const auto& t : targets) {
    Status r = read_tensor(dir, *t.tensor, t.dst);
    if (!r.ok()) return r;
  }
  if (opt != nullptr) opt->set_step_count(static_cast<int>(m.optimizer_step));
  if (state != nullptr) *state = m.train;
  return {};
}

}  // namespace weft::checkpoint
