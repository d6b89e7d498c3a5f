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
// its shard (1/dp of every unit, padded), the steady state:
//   stage 1: + S reduced gradients; m, v and master weights 3S instead of m, v
//   stage 2: gradients S + kZeroBucketsInFlight receive buffers; parameters whole; 3S
//   stage 3: as 2, and parameters S (the master shard)
// plus the busiest moment of a pass, found by walking the backward (docs/planner.md §5): from
// stage 2 on the full gradients of the units written and not yet reduced (the tied wte's from the
// head until the embedding's reduction), stage 3's gathered units, and the reductions in flight's
// MPI temporaries on the busiest rank (all-reduce: 1/dp of the unit; reduce-scatter: two copies,
// one at dp = 2), those below glibc's mmap ceiling (32 MiB) kept on the heap for the whole step.
MemoryEstimate estimate_rank_memory(const GptConfig& cfg, int B, int T, Recompute mode, int threads,
                                    TpShape tp, const std::vector<ChunkMemory>& chunks,
                                    int microbatches, bool pipelined, bool deferred_weight_grads,
                                    ZeroSharding zero = {});

}  // namespace weft::model
