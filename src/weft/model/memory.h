#pragma once
// Predicted memory of one training process (fp32 everything; one tensor-parallel rank's shards):
// parameters, gradients, the two AdamW moments, saved activations and the backward workspace, each
// from the same layouts the model allocates. Kernel scratch (per-thread attention rows) is counted
// under workspace.

#include <cstdint>

#include "weft/model/activation_layout.h"
#include "weft/model/gpt_config.h"
#include "weft/model/recompute.h"

namespace weft::model {

struct MemoryEstimate {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;  // bytes
  int64_t total() const { return params + grads + optimizer + activations + workspace; }
};

MemoryEstimate estimate_training_memory(const GptConfig& cfg, int B, int T, Recompute mode,
                                        int threads, TpShape tp = {});

}  // namespace weft::model
