#include "weft/runtime/checkpointing.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "weft/checkpoint/placement.h"
#include "weft/core/fault.h"

namespace weft::runtime {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The same verdict on every rank: ok when every rank's status is, else every failing rank's
// problems, each prefixed by the rank.
Status agree(comm::Communicator* world, const Status& mine, const std::string& who) {
  std::string text;
  for (const auto& p : mine.problems()) text += (who.empty() ? "" : who + ": ") + p + "\n";
  Status out;
  for (const std::string& t : comm::all_gather_strings(world, text)) {
    size_t at = 0;
    while (at < t.size()) {
      const size_t end = t.find('\n', at);
      out.add(t.substr(at, end - at));
      at = end + 1;
    }
  }
  return out;
}

// "rank tp0-dp1-pp0" in a job of several processes, else "".
std::string rank_name(const CheckpointJob& job) {
  if (job.world == nullptr || job.world->size() == 1) return "";
  return fmt::format("rank tp{}-dp{}-pp{}", job.tp_rank, job.dp_rank, job.pp_rank);
}

checkpoint::ChunkPlace place(const CheckpointJob& job, size_t j) {
  return {&job.chunks[j]->param_layout(), job.chunks[j]->stage(), job.layout.zero, job.layout.dp,
          job.dp_rank};
}

checkpoint::StateBuffers state_of(DistributedOptimizer& opt) {
  const auto s = opt.state();
  return {s.params, s.m, s.v};
}

}  // namespace

std::string CheckpointIo::summary() const {
  return fmt::format("{:.1f} MB in {:.2f} s, {:.2f} GB/s", bytes / 1e6, seconds,
                     seconds > 0 ? bytes / seconds / 1e9 : 0.0);
}

Result<CheckpointIo> save_checkpoint(const CheckpointJob& job, const std::string& root,
                                     const checkpoint::TrainState& state, int keep_last) {
  const auto t0 = std::chrono::steady_clock::now();
  comm::Communicator* world = job.world;
  const bool leader = world == nullptr || world->rank() == 0;
  const std::string who = rank_name(job);

  // 1. Rank 0 makes the temporary directory, named after its process.
  int64_t token = ::getpid();
  if (world != nullptr) world->broadcast(&token, 1, 0);
  Result<std::string> tmp = std::string();
  if (leader) tmp = checkpoint::begin_save(root, state.step, token);
  Status s = agree(world, tmp.ok() ? Status() : tmp.status(), who);
  if (!s.ok()) return s;
  const std::string tmp_dir =
      fmt::format("{}/{}.tmp-{}", root, checkpoint::step_dir_name(state.step), token);

  // 2. Every rank writes its part, straight from its buffers.
  std::vector<checkpoint::WritePiece> pieces;
  for (size_t j = 0; j < job.chunks.size(); ++j) {
    auto mine = checkpoint::write_pieces(place(job, j), state_of(*job.opts[j]));
    pieces.insert(pieces.end(), mine.begin(), mine.end());
  }
  const auto names =
      checkpoint::rank_file_names(job.layout.zero, job.tp_rank, job.dp_rank, job.pp_rank);
  auto files = checkpoint::write_rank_files(tmp_dir, names, pieces);
  fault_point("save", state.step);  // crash tests: this rank's files written, no metadata yet
  s = agree(world, files.ok() ? Status() : files.status(), who);
  if (!s.ok()) {
    if (leader) checkpoint::abort_save(tmp_dir);
    return s;
  }

  // 3. Every rank learns what every rank wrote (for the size); rank 0 commits it.
  checkpoint::Metadata m;
  Status parsed;
  for (const std::string& text :
       comm::all_gather_strings(world, checkpoint::rank_files_to_json(files.value()))) {
    auto f = checkpoint::rank_files_from_json(text);
    if (!f.ok()) {
      parsed.merge(f.status());
      continue;
    }
    for (auto& sh : f.value().shards) m.shards.push_back(std::move(sh));
    for (auto& t : f.value().tensors) m.tensors.push_back(std::move(t));
  }
  int64_t bytes = 0;
  for (const auto& sh : m.shards) bytes += sh.bytes;
  Result<std::string> dir = std::string();
  if (leader) {
    m.model = job.model;
    m.parallel = job.layout;
    m.has_optimizer = true;
    m.adamw = job.opts[0]->adamw().config();
    m.optimizer_step = job.opts[0]->step_count();
    m.train = state;
    if (parsed.ok()) {
      dir = checkpoint::commit_save(root, tmp_dir, m, keep_last);
    } else {
      checkpoint::abort_save(tmp_dir);
      dir = parsed;
    }
  }
  s = agree(world, dir.ok() ? Status() : dir.status(), who);
  if (!s.ok()) return s;
  return CheckpointIo{
      (std::filesystem::path(root) / checkpoint::step_dir_name(state.step)).string(), bytes,
      seconds_since(t0)};
}

Status check_parameters_finite(const CheckpointJob& job) {
  Status mine;
  for (size_t j = 0; j < job.chunks.size() && mine.ok(); ++j) {
    auto st = state_of(*job.opts[j]);
    st.m = st.v = nullptr;
    for (const checkpoint::ReadPiece& p : checkpoint::read_pieces(place(job, j), st)) {
      const float* bad =
          std::find_if(p.data, p.data + p.tensor.count, [](float x) { return !std::isfinite(x); });
      if (bad != p.data + p.tensor.count) {
        mine =
            Status::error(fmt::format("non-finite parameter {} in {} (element {} of this "
                                      "rank's part)",
                                      *bad, p.tensor.name, p.tensor.begin + (bad - p.data)));
        break;
      }
    }
  }
  const std::string who = rank_name(job);
  return agree(job.world, mine, who.empty() ? "this process" : who);
}

Result<CheckpointIo> load_checkpoint(const CheckpointJob& job, const std::string& dir,
                                     checkpoint::TrainState& state) {
  const auto t0 = std::chrono::steady_clock::now();
  auto md = checkpoint::read_metadata(dir);
  Status s;
  if (!md.ok()) {
    s = md.status();
  } else if (!md.value().has_optimizer) {
    s = Status::error(fmt::format("{}/{}: the checkpoint has no optimizer state to resume from",
                                  dir, checkpoint::kMetadataFile));
  } else {
    std::vector<checkpoint::ReadPiece> targets;
    for (size_t j = 0; j < job.chunks.size(); ++j) {
      auto mine = checkpoint::read_pieces(place(job, j), state_of(*job.opts[j]));
      targets.insert(targets.end(), mine.begin(), mine.end());
    }
    s = checkpoint::load_pieces(dir, md.value(), job.model, targets);
  }
  // Every rank reads the same metadata, so most problems are everyone's: report them once.
  Status all = agree(job.world, s, rank_name(job));
  if (!all.ok()) return s.ok() ? all : s;
  for (DistributedOptimizer* opt : job.opts) {
    opt->state_loaded(static_cast<int>(md.value().optimizer_step));
  }
  state = md.value().train;
  int64_t bytes = 0;
  for (const auto& sh : md.value().shards) bytes += sh.bytes;
  return CheckpointIo{dir, bytes, seconds_since(t0)};
}

}  // namespace weft::runtime
