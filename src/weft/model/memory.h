#pragma once
// Predicted memory of one training process (fp32 everything; one tensor-parallel rank's shards):
// parameters, gradients, the two AdamW moments, saved activations and the backward workspace, each
// from the same layouts the model allocates. Kernel scratch (per-thread attention rows) is counted
// under workspace.

#include <cstdint>
#include <vector>

#include "weft/model/activation_layout.h"
#include "weft/model/gpt_config.h"
#include "weft/model/param_layout.h"
#include "weft/model/recompute.h"

namespace weft::model {

struct MemoryEstimate {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;  // bytes
  int64_t total() const { return params + grads + optimizer + activations + workspace; }
};

MemoryEstimate estimate_training_memory(const GptConfig& cfg, int B, int T, Recompute mode,
                                        int threads, TpShape tp = {});

// One model chunk of a pipeline rank, as the runtime builds it (runtime/pipeline_runner.h).
struct ChunkMemory {
  StageSpec stage;
  int slots = 1;             // activation slots: its peak in-flight microbatches
  bool sends_grads = false;  // its predecessor stage is on another rank
};

// What a pipeline rank of weft's trainer allocates for its chunks, exactly: per chunk the
// parameters, gradients and both AdamW moments, `slots` microbatches of activations and a
// backward workspace; `microbatches` input-gradient buffers per chunk that sends them; the
// scatter/gather receive buffer (tp > 1 without sequence parallelism, pp > 1); with deferred
// weight gradients (ZB-H1) the kept output gradients of every slot; and the attention backward's
// T x T row block per thread.
MemoryEstimate estimate_rank_memory(const GptConfig& cfg, int B, int T, Recompute mode, int threads,
                                    TpShape tp, const std::vector<ChunkMemory>& chunks,
                                    int microbatches, bool pipelined, bool deferred_weight_grads);

}  // namespace weft::model
