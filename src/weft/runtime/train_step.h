#pragma once
// One training step of a model held by one process or split by tensor parallelism: zero
// gradients, forward + backward over the microbatches (gradient accumulation), then finish_step.
// Pipelines run the same step through the executor (pipeline_runner.h), which ends with the same
// finish_step.

#include <cstdint>
#include <functional>
#include <span>

#include "weft/comm/communicator.h"
#include "weft/model/gpt.h"
#include "weft/runtime/distributed_optimizer.h"

namespace weft::runtime {

struct StepStats {
  float loss = 0;        // mean over microbatches
  double grad_norm = 0;  // before clipping
  bool skipped = false;  // non-finite loss or gradient norm: no update was made
};

// The ranks that hold parts of one model replica, as finish_step needs them.
struct ModelGroups {
  // Every rank holding a part of the replica (tp x pp); null: this process holds all of it.
  comm::Communicator* model = nullptr;
  // The pipeline ranks of the first and last stage (the two copies of the tied wte); null when
  // one rank holds both.
  comm::Communicator* embedding = nullptr;
};

// Called by finish_step once the gradients are complete and their norm taken, before clipping and
// the update. For the equivalence tests: they read each optimizer's grad_parts() there to compare
// one step's gradients with the serial model's (nowhere later: clipping scales them, and ZeRO 2/3
// zero their gradient shards in the update).
using BeforeUpdate = std::function<void()>;

// The end of a step, for any layout and ZeRO stage: completes the gradients (the data-parallel
// reductions, the sequence-parallel LayerNorms, the tied embedding's two copies) on the parts each
// optimizer works on (whole, or its ZeRO shard), takes the global norm over every parameter
// element once (summed over groups.model, and over dp when the parts are shards), clips, and
// updates every chunk with its optimizer unless the loss or norm is not finite. `loss` is the
// step's mean loss, already known on every rank.
StepStats finish_step(std::span<model::Gpt* const> chunks,
                      std::span<DistributedOptimizer* const> opts, const ModelGroups& groups,
                      float loss, float lr, double clip_norm,
                      const BeforeUpdate& before_update = {});

// tokens/targets: `microbatches` consecutive [B,T] blocks; `opt` is the model's optimizer (dp
// group or not).
StepStats train_step(model::Gpt& model, DistributedOptimizer& opt, const int32_t* tokens,
                     const int32_t* targets, int B, int T, int microbatches, float lr,
                     double clip_norm, const BeforeUpdate& before_update = {});

}  // namespace weft::runtime
