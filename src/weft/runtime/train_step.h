#pragma once
// One training step of a model (serial or tensor-parallel): zero gradients, forward + backward
// over the microbatches (gradient accumulation), global-norm clipping, AdamW update. Every tp rank
// passes the same tokens.

#include <cstdint>

#include "weft/model/gpt.h"
#include "weft/optim/adamw.h"

namespace weft::runtime {

struct StepStats {
  float loss = 0;        // mean over microbatches
  double grad_norm = 0;  // before clipping
  bool skipped = false;  // non-finite loss or gradient norm: no update was made
};

// tokens/targets: `microbatches` consecutive [B,T] blocks.
StepStats train_step(model::Gpt& model, optim::AdamW& opt, const int32_t* tokens,
                     const int32_t* targets, int B, int T, int microbatches, float lr,
                     double clip_norm);

}  // namespace weft::runtime
