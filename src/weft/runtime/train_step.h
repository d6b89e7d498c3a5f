#pragma once
// How every training step ends, whatever the layout and backend (finish_step), and the one rule
// of the global gradient norm. The pipeline runtime (pipeline_runner.h) runs a step's passes.

#include <functional>
#include <span>

#include "weft/comm/communicator.h"
#include "weft/model/gpt.h"
#include "weft/optim/distributed_optimizer.h"

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
  // The pipeline ranks of the first and last stage (the two copies of the tied wte), on the
  // backend's memory; null when one rank holds both.
  comm::Communicator* embedding = nullptr;
  // The replicas (host memory; null: dp = 1): the norm's sum over ZeRO's gradient shards.
  comm::Communicator* replicas = nullptr;
  // The pipeline group the stages' activations and gradients cross (on the backend's memory; null
  // when pp = 1): finish_step bounds the device's waits on it with the step's other groups.
  comm::Communicator* boundary = nullptr;
};

// ---- The global gradient norm: ONE rule (finish_step) ----
// The norm is over every parameter element of the model replica once:
//   - a rank counts its tensor-parallel shards, and the tp-replicated tensors (LayerNorms, wpe,
//     row-parallel biases) on tp rank 0 only;
//   - the tied word embedding counts on the stage that holds the embedding; the last stage's copy
//     (a head without the embedding) is the same parameter and does not count;
//   - the ranks' shares are summed over the replica's model group (tp x pp), and, when the parts
//     are ZeRO shards (ZeRO 1-3: each dp rank holds a different range), over those shards too.
// Then the clip factor optim::clip_factor(norm, clip_norm), and the step is skipped (no update)
// when the loss or the norm is not finite. Only the per-element sum of squares is the engine's.

// One model chunk of this rank: its layout, stage and tp rank, and its gradient parts in buffer
// order (whole slices, or the ZeRO shard's parts).
struct NormChunk {
  const model::ParamLayout* layout = nullptr;
  model::StageSpec stage;
  int tp_rank = 0;
  std::span<const optim::GradPart> parts;
};
// The engine's kernel: the sum of squares (double) over the given parts, all of which count.
using SumSquares = std::function<double(std::span<const optim::GradPart>)>;

struct GradNorm {
  double norm = 0;       // before clipping
  float clip = 1.0f;     // the factor to scale the gradients by
  bool skipped = false;  // non-finite loss or norm: make no update
};
// The rule above: each chunk's counted parts summed with `sum_squares` (chunk by chunk, in
// order), then over `model_group` and `shard_group` (each may be null), then clip and skip.
GradNorm global_grad_norm(std::span<const NormChunk> chunks, const SumSquares& sum_squares,
                          comm::Communicator* model_group, comm::Communicator* shard_group,
                          float loss, double clip_norm);

// Called by finish_step once the gradients are complete and their norm taken, before clipping and
// the update. For the equivalence tests: they read each optimizer's grad_parts() there to compare
// one step's gradients with the serial model's (nowhere later: clipping scales them, and ZeRO 2/3
// zero their gradient shards in the update).
using BeforeUpdate = std::function<void()>;

// The end of a step, for any layout, ZeRO stage and backend: completes the gradients (the
// data-parallel reductions, the sequence-parallel LayerNorms, the tied embedding's two copies) on
// the parts each optimizer works on (whole, or its ZeRO shard), takes global_grad_norm with the
// backend's sum of squares, and updates every chunk with its optimizer, clipping inside AdamW,
// unless the step is skipped. `loss` is the step's mean loss, already known on every rank.
StepStats finish_step(std::span<model::Gpt* const> chunks,
                      std::span<optim::DistributedOptimizer* const> opts, const ModelGroups& groups,
                      float loss, float lr, double clip_norm,
                      const BeforeUpdate& before_update = {});

}  // namespace weft::runtime
