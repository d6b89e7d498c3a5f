#pragma once
// A job's checkpoints (checkpoint/checkpoint.h): every rank writes its own part of its model
// chunks' state in parallel (checkpoint/placement.h says which part) and rank 0 the metadata; a
// load has every rank read its part from a checkpoint written under any layout. Collective over
// the job's ranks.
//
// The state is read where the optimizer holds it (RankState): a state in host memory (the CPU
// engine's optim::DistributedOptimizer) is written straight from its buffers; a state in a device's
// memory (a PipelineRunner on a GPU) is streamed through the engine's bounded staging buffer,
// window after window, and a load comes back the same way through load_pieces' bounded window. No
// host copy of the model state exists: host memory per rank during a save or a load is O(buffer),
// not O(parameters) (tests/runtime/checkpoint_memory_test.cc measures it). The format is the same
// either way, so checkpoints of either engine load on the other under any layout.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weft/checkpoint/checkpoint.h"
#include "weft/checkpoint/placement.h"
#include "weft/comm/communicator.h"
#include "weft/core/status.h"
#include "weft/model/gpt.h"
#include "weft/model/gpt_config.h"
#include "weft/optim/adamw.h"
#include "weft/optim/distributed_optimizer.h"

namespace weft::runtime {

// A rank's training state: its chunks' optim::DistributedOptimizer buffers
// (DistributedOptimizer::state()), in its backend's memory. Chunk j's state is three groups (0: the
// fp32 parameters, from ZeRO 1 on the master shard; 1: AdamW's m; 2: its v), each indexed by
// OwnedPart::at of optim::zero_owned_parts of place(j) (checkpoint/placement.h). They are read and
// written in place where that is host memory, else streamed a window at a time through a host
// buffer of `staging_bytes`, allocated at the first checkpoint (a run that never saves never holds
// it). No host copy of the model state exists either way.
class RankState {
 public:
  RankState(std::span<model::Gpt* const> chunks, std::span<optim::DistributedOptimizer* const> opts,
            const layout::Layout& p, int dp_rank, int64_t staging_bytes)
      : chunks_(chunks),
        opts_(opts),
        zero_(p.zero),
        dp_(p.dp),
        dp_rank_(dp_rank),
        staging_floats_(std::max<int64_t>(staging_bytes / int64_t{sizeof(float)}, 1)) {}
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  checkpoint::ChunkPlace place(int j) const {
    const model::Gpt& g = *chunks_[j];
    return {&g.param_layout(), g.stage(), zero_, dp_, dp_rank_};
  }
  // The group's buffer when it is in host memory (read and written in place); null: it is reached
  // through read() and write() only.
  float* host_buffer(int j, int group) {
    if (!opts_[j]->backend().host_memory()) return nullptr;
    const optim::DistributedOptimizer::StateView s = opts_[j]->state();
    return group == 0 ? s.params : group == 1 ? s.m : s.v;
  }
  // Elements [at, at + n) of a group to or from host memory (n at most staging().size()).
  void read(int j, int group, int64_t at, int64_t n, float* out) {
    opts_[j]->read_state(group, at, n, out);
  }
  void write(int j, int group, int64_t at, int64_t n, const float* in) {
    opts_[j]->write_state(group, at, n, in);
  }
  // The bounded host buffer a state outside host memory goes through (on CUDA it would be pinned,
  // for the copy engines' full bandwidth); empty when every group has a host_buffer.
  std::span<float> staging() {
    if (opts_[0]->backend().host_memory()) return {};
    if (staging_.empty()) staging_.resize(static_cast<size_t>(staging_floats_));
    return staging_;
  }
  // Asynchronous saves: the floats of each of chunk j's groups (the whole buffer read() indexes),
  // a copy of a whole group into host memory (group_floats(j) floats; a device's copy is complete
  // after wait_snapshot(), and the next step's update is ordered after it), and host memory for
  // such copies (page-locked on CUDA).
  int64_t group_floats(int j) const { return opts_[j]->state_floats(); }
  void snapshot(int j, int group, float* out) { opts_[j]->snapshot_state(group, out); }
  void wait_snapshot() { opts_[0]->backend().wait_downloads(); }
  std::shared_ptr<void> allocate_host(int64_t bytes) {
    return opts_[0]->backend().allocate_host(bytes);
  }
  int step_count() const { return opts_[0]->step_count(); }
  optim::AdamWConfig adamw() const { return opts_[0]->config(); }
  // After a checkpoint was loaded into the state, on every rank: the step count, and whatever the
  // optimizers derive from the state (ZeRO's model copies, a device's bf16 weights).
  void loaded(int step_count) {
    for (optim::DistributedOptimizer* opt : opts_) opt->state_loaded(step_count);
  }

 private:
  std::span<model::Gpt* const> chunks_;
  std::span<optim::DistributedOptimizer* const> opts_;
  int zero_, dp_, dp_rank_;
  int64_t staging_floats_;
  std::vector<float> staging_;
};

struct CheckpointJob {
  model::GptConfig model;
  layout::Layout layout;  // what the checkpoint records of it: tp, pp, dp, vp, zero
  int tp_rank = 0, dp_rank = 0, pp_rank = 0;
  RankState* state = nullptr;           // this rank's chunks
  comm::Communicator* world = nullptr;  // null: one process
};

// A checkpoint written or read: its directory, its files' bytes (every rank's) and the seconds
// the collective took on this rank. An asynchronous save's seconds run from its start to the
// moment every rank's files were written, and `held` is what it cost the training thread (the
// snapshot, and the start and commit collectives).
struct CheckpointIo {
  std::string dir;
  int64_t bytes = 0;
  double seconds = 0;
  bool background = false;
  double held = 0;
  int64_t step = -1;  // a save's
  // "497.8 MB in 1.23 s, 0.40 GB/s"; in the background: "...; in the background, training held
  // 0.05 s"
  std::string summary() const;
};

// Writes ROOT/step_<state.step> (checkpoint::begin_save .. commit_save over the ranks). A failure
// on any rank (a write error, a non-finite value in its part) fails the save on every rank with
// that rank's message; the temporary is removed.
Result<CheckpointIo> save_checkpoint(const CheckpointJob& job, const std::string& root,
                                     const checkpoint::TrainState& state, int keep_last);

// A run's saves, synchronous or asynchronous (train.async_checkpoint). An asynchronous save
// copies the rank's state into host memory (RankState::snapshot: one buffer, kept for the next
// save) and a thread writes the rank's files from that copy while training goes on; the first
// poll() after every rank's writer is done commits it (rank 0: metadata, rename, `latest`), so
// until then `latest` names the previous checkpoint and a crash leaves only a temporary, which the
// next run removes (checkpoint::prepare_root). At most one save is in flight: the next save and
// finish() wait for it. Every call is collective: the ranks make the same calls at the same steps.
class CheckpointSaver {
 public:
  CheckpointSaver(const CheckpointJob& job, std::string root, int keep_last);
  // Waits for a writer in flight and commits nothing: a commit takes every rank, and this runs
  // when the run ends in an error.
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Writes `state`'s checkpoint now (save_checkpoint), after the save in flight is committed.
  Status save(const checkpoint::TrainState& state);
  // Starts the asynchronous save of `state`, after the save in flight is committed.
  Status save_async(const checkpoint::TrainState& state);
  // Commits the save in flight if every rank's files are written; returns at once otherwise.
  Status poll();
  // Waits for the save in flight and commits it.
  Status finish();
  bool in_flight() const { return writer_.joinable(); }
  // The saves committed since the last call, oldest first.
  std::vector<CheckpointIo> take_committed();

  // Takes and fills the host memory of the asynchronous saves' snapshot now (else the first
  // asynchronous save does), so that no save pays for its first touch: a run that saves in the
  // background calls it before its first step.
  void reserve_snapshot();

 private:
  struct SnapshotPlan {
    std::vector<std::pair<checkpoint::StatePiece, int64_t>> pieces;  // and its snapshot offset
    std::vector<std::pair<int64_t, int>> groups;  // (snapshot offset, chunk * 3 + group)
    int64_t floats = 0;
  };
  static SnapshotPlan plan_snapshot(RankState& st);
  void reserve(int64_t floats);
  Status commit_in_flight();

  CheckpointJob job_;
  std::string root_;
  int keep_last_;
  std::shared_ptr<void> snapshot_;
  int64_t snapshot_floats_ = 0;
  // The save in flight: its state, temporary directory, start, time held so far, and what the
  // writer thread wrote (read once `written_`).
  checkpoint::TrainState state_;
  int64_t optimizer_step_ = 0;
  std::string tmp_dir_;
  std::chrono::steady_clock::time_point started_;
  double held_ = 0, drained_ = 0;
  Result<checkpoint::RankFiles> files_ = checkpoint::RankFiles{};
  std::atomic<bool> written_{false};
  std::thread writer_;
  std::vector<CheckpointIo> committed_;
};

// Loads DIR into the chunks' parameters and optimizer state, resharding as needed, and sets
// `state` to the trainer's. Fails on every rank when any rank's part fails to load.
Result<CheckpointIo> load_checkpoint(const CheckpointJob& job, const std::string& dir,
                                     checkpoint::TrainState& state);

// Whether every rank's parameters are finite (every rank learns of any rank's problem, which names
// the rank and the tensor). After a non-finite loss: bad data or too high a learning rate leave the
// parameters finite and a skipped step helps; non-finite parameters mean a corrupt state.
Status check_parameters_finite(const CheckpointJob& job);

}  // namespace weft::runtime
