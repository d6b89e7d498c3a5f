#pragma once
// A job's checkpoints (checkpoint/checkpoint.h): every rank writes its own part of its model
// chunks' state in parallel, straight from its buffers (checkpoint/placement.h says which part),
// and rank 0 the metadata; a load has every rank read its part from a checkpoint written under any
// layout. Collective over the job's ranks.

#include <span>
#include <string>

#include "weft/checkpoint/checkpoint.h"
#include "weft/comm/communicator.h"
#include "weft/core/status.h"
#include "weft/model/gpt.h"
#include "weft/runtime/distributed_optimizer.h"

namespace weft::runtime {

struct CheckpointJob {
  model::GptConfig model;
  checkpoint::ParallelLayout layout;
  int tp_rank = 0, dp_rank = 0, pp_rank = 0;
  std::span<model::Gpt* const> chunks;  // this rank's, with their optimizers
  std::span<DistributedOptimizer* const> opts;
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
