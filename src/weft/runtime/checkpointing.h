#pragma once
// A job's checkpoints (checkpoint/checkpoint.h): every rank writes its own part of its model
// chunks' state in parallel (checkpoint/placement.h says which part) and rank 0 the metadata; a
// load has every rank read its part from a checkpoint written under any layout. Collective over
// the job's ranks.
//
// The state is read where the optimizer holds it (RankState, implemented by the engines): a state
// in host memory (the CPU engine's optim::DistributedOptimizer) is written straight from its
// buffers; a state in a device's memory (a PipelineRunner on a GPU) is streamed through the
// engine's bounded staging buffer, window after window, and a load comes back the same way through
// load_pieces' bounded window. No host copy of the model state exists: host memory per rank during
// a save or a load is O(buffer), not O(parameters) (tests/runtime/checkpoint_memory_test.cc
// measures it). The format is the same either way, so checkpoints of either engine load on the
// other under any layout.

#include <cstdint>
#include <span>
#include <string>

#include "weft/checkpoint/checkpoint.h"
#include "weft/checkpoint/placement.h"
#include "weft/comm/communicator.h"
#include "weft/core/status.h"
#include "weft/model/gpt_config.h"
#include "weft/optim/adamw.h"

namespace weft::runtime {

// A rank's training state, wherever it lives. Chunk j's state is three groups (0: the fp32
// parameters, from ZeRO 1 on the master shard; 1: AdamW's m; 2: its v), each indexed by
// OwnedPart::at of optim::zero_owned_parts of place(j) (checkpoint/placement.h).
class RankState {
 public:
  virtual ~RankState() = default;
  virtual int num_chunks() const = 0;
  virtual checkpoint::ChunkPlace place(int j) const = 0;
  // The group's buffer when it is in host memory (read and written in place); null: it is reached
  // through read() and write() only.
  virtual float* host_buffer(int j, int group) = 0;
  // Elements [at, at + n) of a group to or from host memory (n at most staging().size()).
  virtual void read(int j, int group, int64_t at, int64_t n, float* out) = 0;
  virtual void write(int j, int group, int64_t at, int64_t n, const float* in) = 0;
  // The bounded host buffer a state outside host memory goes through (on CUDA it would be pinned,
  // for the copy engines' full bandwidth); empty when every group has a host_buffer.
  virtual std::span<float> staging() = 0;
  virtual int step_count() const = 0;
  virtual optim::AdamWConfig adamw() const = 0;
  // After a checkpoint was loaded into the state, on every rank: the step count, and whatever the
  // engine derives from the state (ZeRO's model copies, a device's bf16 weights).
  virtual void loaded(int step_count) = 0;
};

struct CheckpointJob {
  model::GptConfig model;
  layout::Layout layout;  // what the checkpoint records of it: tp, pp, dp, vp, zero
  int tp_rank = 0, dp_rank = 0, pp_rank = 0;
  RankState* state = nullptr;           // this rank's chunks
  comm::Communicator* world = nullptr;  // null: one process
};

// A checkpoint written or read: its directory, its files' bytes (every rank's) and the seconds
// the collective took on this rank.
struct CheckpointIo {
  std::string dir;
  int64_t bytes = 0;
  double seconds = 0;
  std::string summary() const;  // "497.8 MB in 1.23 s, 0.40 GB/s"
};

// Writes ROOT/step_<state.step> (checkpoint::begin_save .. commit_save over the ranks). A failure
// on any rank (a write error, a non-finite value in its part) fails the save on every rank with
// that rank's message; the temporary is removed.
Result<CheckpointIo> save_checkpoint(const CheckpointJob& job, const std::string& root,
                                     const checkpoint::TrainState& state, int keep_last);

// Loads DIR into the chunks' parameters and optimizer state, resharding as needed, and sets
// `state` to the trainer's. Fails on every rank when any rank's part fails to load.
Result<CheckpointIo> load_checkpoint(const CheckpointJob& job, const std::string& dir,
                                     checkpoint::TrainState& state);

// Whether every rank's parameters are finite (every rank learns of any rank's problem, which names
// the rank and the tensor). After a non-finite loss: bad data or too high a learning rate leave the
// parameters finite and a skipped step helps; non-finite parameters mean a corrupt state.
Status check_parameters_finite(const CheckpointJob& job);

}  // namespace weft::runtime
