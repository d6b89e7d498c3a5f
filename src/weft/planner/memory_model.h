#pragma once
// Memory per device of one configuration (docs/planner.md §5): weights, gradients and optimizer
// state by precision and ZeRO stage; activations by recomputation, sequence parallelism and the
// schedule's in-flight microbatches; buffers (logits, recomputation working set, messages).

#include <cstdint>
#include <string>
#include <vector>

#include "weft/model/memory.h"
#include "weft/planner/config.h"

namespace weft::planner {

struct MemoryBreakdown {
  double weights = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;  // bytes
  double total() const { return weights + grads + optimizer + activations + buffers; }
};

// Bytes of weights, gradients and optimizer state for `params` local parameters, with ZeRO
// stage `zero` over `dp` ranks (Rajbhandari et al. 2020, §5: P_os shards the optimizer state,
// P_os+g also the gradients, P_os+g+p also the weights).
MemoryBreakdown model_state_bytes(int64_t params, Precision precision, int zero, int dp);

// Activation bytes one transformer layer keeps for backward for one microbatch of b sequences
// (Korthikanti et al. 2022, Eqs. 2-6, with 2-byte activations and 1-byte dropout masks; scaled
// by precision_bytes().activation / 2 for other formats):
//   none, no sp       s b h (10 + 24/t + 5 a s / (h t))
//   none, sp          s b h (34 + 5 a s / h) / t
//   selective, no sp  s b h (10 + 24/t)
//   selective, sp     s b h 34 / t
//   full              2 s b h       (only the layer's input; / t with sp)
// A separate function so a backend with its own layout (weft's CPU trainer keeps a different
// set of tensors) can substitute its exact count.
double layer_activation_bytes(const Job& job, const ParallelConfig& c);

// Per pipeline rank: the most (stage, microbatch) pairs in flight (schedule::peak_in_flight) for
// this configuration's schedule.
std::vector<int> in_flight(const ParallelConfig& c, const Job& job);

// The device that needs the most, given the in-flight counts per pipeline rank (from the
// simulated schedule): max over ranks of its model state + in_flight[r] * layers per stage *
// layer_activation_bytes + its buffers.
// `runtime_bytes`: the cluster preset's (Cluster::runtime_bytes), for weft's CPU trainer (FP32).
MemoryBreakdown peak_memory(const Job& job, const ParallelConfig& c,
                            const std::vector<int>& in_flight,
                            int64_t runtime_bytes = model::kDefaultRuntimeBytes);

// weft's own CPU trainer (fp32 everything), exactly what pipeline rank `pp_rank` allocates
// (model::estimate_rank_memory over the chunks and activation slots of its schedule program):
// what `weft bench step` measures against, and what peak_memory uses for Precision::FP32 at every
// ZeRO stage (the trainer's own layout, not Korthikanti's formulas).
model::MemoryEstimate weft_rank_memory(const Job& job, const ParallelConfig& c, int pp_rank,
                                       int threads = 1,
                                       int64_t runtime_bytes = model::kDefaultRuntimeBytes);

std::string format_bytes(double bytes);  // "80.0 GiB"

}  // namespace weft::planner
