// load_pieces: a checkpoint written under one layout, read under another. Every piece, of the
// checkpoint or wanted by the reader, is a set of runs of global element indices (a tensor-parallel
// shard, clipped to the piece's elements: model::shard_runs); a wanted piece is filled from the
// intersections of its runs with those of every stored piece of the same tensor and group.

#include <fcntl.h>
#include <fmt/format.h>

#include <unistd.h>
#include <string_view>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "weft/checkpoint/checkpoint.h"
#include "weft/core/pending_file.h"

namespace weft::checkpoint {
namespace {
namespace fs = std::filesystem;

// The piece's elements as runs {local (from the piece's first element), global, n}, ascending in
// both. Metadata has checked that the split divides the global shape.
std::vector<model::ShardRun> piece_runs(const TensorInfo& t) {
  return model::shard_runs(t.global_shape, t.split, t.tp, t.tp_rank, t.begin, t.begin + t.count);
}

// Copy `n` elements from element `src` of a stored piece to element `dst` of a wanted one.
struct Copy {
  int64_t src = 0, dst = 0, n = 0;
};

std::vector<Copy> intersect(const std::vector<model::ShardRun>& want,
                            const std::vector<model::ShardRun>& have) {
  std::vector<Copy> out;
  size_t i = 0, j = 0;
  while (i < want.size() && j < have.size()) {
    const auto &a = want[i], &b = have[j];
    const int64_t lo = std::max(a.global, b.global);
    const int64_t hi = std::min(a.global + a.n, b.global + b.n);
    if (lo < hi) out.push_back({b.local + (lo - b.global), a.local + (lo - a.global), hi - lo});
    if (a.global + a.n < b.global + b.n) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
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
  cmp("ffn", a.ffn(), b.ffn());
  cmp("n_kv_head", a.kv_heads(), b.kv_heads());
  auto name = [&](const char* key, const char* x, const char* y) {
    if (std::string_view(x) != y) d.push_back(fmt::format("{} {} vs {}", key, x, y));
  };
  name("position", model::position_name(a.position), model::position_name(b.position));
  name("norm", model::norm_name(a.norm), model::norm_name(b.norm));
  name("mlp", model::mlp_name(a.mlp), model::mlp_name(b.mlp));
  name("tie_embeddings", a.tie_embeddings ? "true" : "false", b.tie_embeddings ? "true" : "false");
  name("bias", a.bias ? "true" : "false", b.bias ? "true" : "false");
  if (a.rope() && a.rope_theta != b.rope_theta) {
    d.push_back(fmt::format("rope_theta {} vs {}", a.rope_theta, b.rope_theta));
  }
  if (a.norm_eps != b.norm_eps)
    d.push_back(fmt::format("norm_eps {} vs {}", a.norm_eps, b.norm_eps));
  return fmt::format("{}", fmt::join(d, ", "));
}

}  // namespace

Status load_pieces(const std::string& dir, const Metadata& m, const model::GptConfig& expected,
                   std::span<const ReadPiece> targets) {
  const std::string origin = (fs::path(dir) / kMetadataFile).string();
  const std::string diff = config_diff(m.model, expected);
  if (!diff.empty()) {
    return Status::error(fmt::format(
        "{}: the checkpoint holds another model: '{}' vs this run's '{}' ({}; checkpoint vs run)",
        origin, m.model.name, expected.name, diff));
  }
  std::map<std::pair<std::string, std::string>, std::vector<const TensorInfo*>> stored;
  for (const auto& t : m.tensors) stored[{t.group, t.name}].push_back(&t);

  // Which stored pieces each target needs, and the files they are in.
  Status s;
  std::vector<const std::vector<const TensorInfo*>*> sources(targets.size());
  std::set<std::string> files;
  for (size_t i = 0; i < targets.size(); ++i) {
    const TensorInfo& t = targets[i].tensor;
    auto it = stored.find({t.group, t.name});
    if (it == stored.end()) {
      s.add(fmt::format("{}: tensor {} ({}) is missing", origin, t.name, t.group));
      continue;
    }
    sources[i] = &it->second;
    for (const TensorInfo* p : it->second) {
      if (p->global_shape != t.global_shape) {
        s.add(fmt::format("{}: tensor {} ({}) has shape {}, the model expects {}", origin, t.name,
                          t.group, shape_str(p->global_shape), shape_str(t.global_shape)));
        break;
      }
      files.insert(p->file);
    }
  }
  if (!s.ok()) return s;
  // The candidate files' real sizes first: they bound every piece before any run is computed.
  for (const auto& sh : m.shards) {
    if (files.count(sh.file) == 0) continue;
    Status v = check_shard_size(dir, sh);
    if (!v.ok()) return v;
  }

  // Per stored piece, the copies into each target; and every target element covered once.
  struct Job {
    const ReadPiece* target;
    std::vector<Copy> copies;
  };
  std::map<const TensorInfo*, std::vector<Job>> jobs;
  for (size_t i = 0; i < targets.size(); ++i) {
    const TensorInfo& t = targets[i].tensor;
    const auto want = piece_runs(t);
    int64_t covered = 0;
    for (const TensorInfo* p : *sources[i]) {
      auto copies = intersect(want, piece_runs(*p));
      if (copies.empty()) continue;
      for (const Copy& c : copies) covered += c.n;
      jobs[p].push_back({&targets[i], std::move(copies)});
    }
    if (covered != t.count) {
      s.add(fmt::format(
          "{}: tensor {} ({}): the checkpoint's pieces cover {} of the {} elements wanted{}",
          origin, t.name, t.group, covered, t.count, covered > t.count ? " (they overlap)" : ""));
    }
  }
  if (!s.ok()) return s;
  // Then the checksums of the files read from: under ZeRO or tensor parallelism a rank reads a
  // part of the checkpoint, and hashes only that part's files.
  std::set<std::string> read_from;
  for (const auto& [piece, piece_jobs] : jobs) read_from.insert(piece->file);
  for (const auto& sh : m.shards) {
    if (read_from.count(sh.file) == 0) continue;
    Status v = verify_shard(dir, sh);
    if (!v.ok()) return v;
  }

  // Each stored piece is read once, only the span the copies need, a bounded window at a time,
  // then scattered: straight into a target in host memory, or through its `store` in runs of
  // consecutive elements (a tensor-parallel shard's rows are consecutive in the target).
  struct Fds {  // closed on every return
    std::map<std::string, int> by_file;
    ~Fds() {
      for (auto& [file, fd] : by_file) ::close(fd);
    }
  } fds;
  std::vector<float> buf, run;
  const ReadPiece* run_target = nullptr;
  int64_t run_begin = 0;
  auto flush = [&] {
    if (!run.empty()) run_target->store(run_begin, static_cast<int64_t>(run.size()), run.data());
    run.clear();
  };
  auto put = [&](const ReadPiece* target, int64_t dst, const float* src, int64_t n) {
    if (target->data != nullptr) {
      std::copy_n(src, n, target->data + dst);
      return;
    }
    if (run_target != target || run_begin + static_cast<int64_t>(run.size()) != dst ||
        static_cast<int64_t>(run.size()) + n > kLoadWindowFloats) {
      flush();
      if (run.capacity() == 0) run.reserve(static_cast<size_t>(kLoadWindowFloats));
      run_target = target;
      run_begin = dst;
    }
    run.insert(run.end(), src, src + n);
  };
  for (const auto& [piece, piece_jobs] : jobs) {
    const std::string path = (fs::path(dir) / piece->file).string();
    auto fd_it = fds.by_file.find(piece->file);
    if (fd_it == fds.by_file.end()) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Status::error(fmt::format("{}: cannot open: {}", path, strerror(errno)));
      fd_it = fds.by_file.emplace(piece->file, fd).first;
    }
    int64_t lo = piece->count, hi = 0;
    for (const Job& j : piece_jobs) {
      for (const Copy& c : j.copies) {
        lo = std::min(lo, c.src);
        hi = std::max(hi, c.src + c.n);
      }
    }
    for (int64_t w0 = lo; w0 < hi; w0 += kLoadWindowFloats) {
      const int64_t w1 = std::min(hi, w0 + kLoadWindowFloats);
      buf.resize(static_cast<size_t>(w1 - w0));
      const int64_t bytes = (w1 - w0) * int64_t{sizeof(float)};
      if (read_fully(fd_it->second, buf.data(), bytes,
                     piece->offset + w0 * int64_t{sizeof(float)}) != bytes) {
        return Status::error(fmt::format("{}: short read: {}", path, strerror(errno)));
      }
      if (const float* bad = first_non_finite(buf.data(), static_cast<int64_t>(buf.size()))) {
        return Status::error(fmt::format("{}: non-finite value {} in tensor {} ({}), element {}",
                                         path, *bad, piece->name, piece->group,
                                         piece->begin + w0 + (bad - buf.data())));
      }
      for (const Job& j : piece_jobs) {
        for (const Copy& c : j.copies) {
          const int64_t a = std::max(c.src, w0), e = std::min(c.src + c.n, w1);
          if (a < e) put(j.target, c.dst + (a - c.src), buf.data() + (a - w0), e - a);
        }
      }
      flush();
    }
  }
  return {};
}

}  // namespace weft::checkpoint
