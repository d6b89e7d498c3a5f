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

// The ZeRO stage and the data-parallel size it shards over.
struct ZeroSharding {
  int stage = 0;
  int dp = 1;
};

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
// T x T row block per thread. With ZeRO (runtime/distributed_optimizer.h), per chunk and with S
// its shard (1/dp of every unit, padded):
//   stage 1: + S reduced gradients; m, v and master weights 3S instead of m, v
//   stage 2: gradients S + kZeroBucketsInFlight receive buffers + the units resident at once
//            during backward (kZeroBucketsInFlight + 1 of them, plus wte while a stage holding
//            both ends waits for the embedding's part)
//   stage 3: as 2, and parameters S (the master shard) + the units gathered at once (a layer, or
//            wte with wpe or with ln_f)
MemoryEstimate estimate_rank_memory(const GptConfig& cfg, int B, int T, Recompute mode, int threads,
                                    TpShape tp, const std::vector<ChunkMemory>& chunks,
                                    int microbatches, bool pipelined, bool deferred_weight_grads,
                                    ZeroSharding zero = {});

}  // namespace weft::model
