// The planner's memory (planner/memory_model.h) is the one memory model's (model/memory.h) for the
// trainer of the job's precision: the busiest pipeline rank's model::estimate_rank_memory, with no
// formula of its own. That the model equals what each trainer allocates is tested against the
// trainers themselves (tests/parallel/device_memory_test.cc for bf16, the runtime's memory tests
// for fp32).
#include <gtest/gtest.h>

#include <algorithm>

#include "weft/core/check.h"
#include "weft/planner/memory_model.h"
#include "weft/schedule/schedule.h"

namespace weft::planner {
namespace {

Job gpt(Precision p = Precision::BF16Mixed) {
  Job j;
  j.model = {.name = "g",
             .n_layer = 24,
             .n_embd = 2048,
             .n_head = 16,
             .vocab_size = 50257,
             .pad_vocab_to = 1024,
             .max_seq_len = 2048};
  j.seq_len = 2048;
  j.global_batch = 64;
  j.world = 16;
  j.precision = p;
  return j;
}

TEST(PeakMemory, IsTheBusiestRanksEstimateFromTheOneMemoryModel) {
  for (Precision p : {Precision::FP32, Precision::BF16Mixed}) {
    const Job j = gpt(p);
    const layout::Layout c{.tp = 1, .pp = 4, .dp = 4, .micro_batch = 1};
    double most = 0;
    for (int r = 0; r < c.pp; ++r) {
      most = std::max(most, static_cast<double>(weft_rank_memory(j, c, r).total()));
    }
    EXPECT_EQ(peak_memory(j, c).total(), most) << precision_name(p);
  }
}

TEST(PeakMemory, Bf16IsTheDeviceEnginesAllocation) {
  // Per parameter: fp32 master weights and the bf16 copy (6 bytes), fp32 gradients (4), fp32 m
  // and v (8): 18, as Megatron-LM's mixed precision. Activations bf16: 1F1B keeps p - r
  // microbatches on rank r (4 on rank 0 of 4), 6 layers each.
  const Job j = gpt();
  const layout::Layout c{.tp = 1, .pp = 4, .dp = 4, .micro_batch = 1};
  const model::MemoryEstimate r0 = weft_rank_memory(j, c, 0);
  const model::MemoryEstimate r3 = weft_rank_memory(j, c, 3);
  const double params0 = static_cast<double>(r0.grads) / 4;  // fp32 gradients: 4 bytes each
  EXPECT_NEAR(r0.params, 6 * params0, 6 * 256);
  // m and v (8 bytes a parameter) and the AdamW plan's two tables (kernels::adamw_table_bytes:
  // 16 bytes a 4096-element chunk, 56 a tensor, each table in 256-byte blocks).
  EXPECT_GE(r0.optimizer, 8 * params0 + params0 / 4096 * 16);
  EXPECT_LE(r0.optimizer, 8 * params0 + params0 / 4096 * 16 + 200 * 56 + 4 * 256);
  EXPECT_EQ(r0.runtime, 0);
  // A layer's bf16 activations per token: x, ln_1, res_attn, ln_2 (4C), qkv (3C), atty (C), fc
  // before and after GeLU (8C): 16C elements, 32C bytes, and its LayerNorm statistics and lse.
  // x is the layer's input: the stage's input for the first, the previous layer's output for the
  // others; the last layer's output is the stage's, which leaves the slot for a send buffer.
  const double layer = 2048.0 * 2048 * (16 * 2) + 2048.0 * (4 * 4 + 16 * 4);
  EXPECT_GE(r0.activations, 4 * 6 * layer);
  EXPECT_LT(r0.activations, 4 * 6 * layer * 1.2);
  // The last rank's one microbatch: 6 layers and the head's bf16 logits [s, Vp].
  EXPECT_GT(r3.activations, 6 * layer + 2048.0 * 50304 * 2);
  EXPECT_LT(r3.activations, 1.2 * (6 * layer + 2048.0 * 50304 * 2));
}

TEST(PeakMemory, FullRecomputationKeepsOnlyEachLayersInput) {
  const Job j = gpt();
  layout::Layout c{.tp = 2, .pp = 2, .dp = 4, .micro_batch = 2};
  const model::MemoryEstimate none = weft_rank_memory(j, c, 0);
  c.recompute = model::Recompute::Full;
  const model::MemoryEstimate full = weft_rank_memory(j, c, 0);
  EXPECT_EQ(full.params, none.params);
  EXPECT_LT(full.activations, none.activations / 4);
  EXPECT_GT(full.workspace, none.workspace);  // the one layer recomputed
}

TEST(PeakMemory, TheGivenScheduleIsTheOneItWouldMake) {
  const Job j = gpt(Precision::FP32);
  const layout::Layout c{.tp = 1,
                         .pp = 2,
                         .dp = 8,
                         .vp = 2,
                         .micro_batch = 1,
                         .schedule = schedule::Kind::Interleaved,
                         .zero = 2};
  const schedule::Schedule lowered = schedule::add_optimizer_step(schedule::add_communication(
      schedule::make_schedule(c.schedule,
                              {.pp = 2, .vp = 2, .microbatches = c.microbatches(j.global_batch)})
          .value()));
  EXPECT_EQ(peak_memory(j, c, lowered).total(), peak_memory(j, c).total());
}

TEST(PeakMemory, Bf16ZeroShardsWhatEachStageShards) {
  // The device engine's ZeRO (optim::DistributedOptimizer on a bf16 backend): stage 1 shards the
  // moments and the fp32 master weights (the model keeps its bf16 copy whole), stage 2 also the
  // gradients, stage 3 also the bf16 weights; tests/parallel/device_memory_test.cc checks each
  // against allocation.
  const Job j = gpt();
  const MemoryBreakdown z0 = peak_memory(j, {.tp = 1, .pp = 1, .dp = 16});
  const MemoryBreakdown z1 = peak_memory(j, {.tp = 1, .pp = 1, .dp = 16, .zero = 1});
  const MemoryBreakdown z2 = peak_memory(j, {.tp = 1, .pp = 1, .dp = 16, .zero = 2});
  const MemoryBreakdown z3 = peak_memory(j, {.tp = 1, .pp = 1, .dp = 16, .zero = 3});
  EXPECT_LT(z1.optimizer, z0.optimizer / 4);
  EXPECT_LT(z1.weights, z0.weights);  // no fp32 master weights in the model
  EXPECT_LT(z2.grads, z1.grads / 2);  // the pool holds the units in flight (the wte is large)
  EXPECT_LT(z3.weights, z2.weights / 4);
  EXPECT_LT(z3.total(), z2.total());
}

TEST(PeakMemory, Bf16SequenceParallelismAndZeroBubbleArePricedAsTheDeviceAllocatesThem) {
  // What tests/parallel/device_memory_test.cc checks against allocation, priced here at scale:
  // sequence parallelism splits the residual stream's activations; zb-h1 keeps each slot's
  // output gradients from its I pass to its W pass.
  const Job j = gpt();
  const MemoryBreakdown tp2 = peak_memory(j, {.tp = 2, .pp = 1, .dp = 8});
  const MemoryBreakdown sp = peak_memory(j, {.tp = 2, .pp = 1, .dp = 8, .sequence_parallel = true});
  EXPECT_LT(sp.activations, tp2.activations);
  const MemoryBreakdown f1b = peak_memory(j, {.tp = 1, .pp = 2, .dp = 8});
  const MemoryBreakdown zb =
      peak_memory(j, {.tp = 1, .pp = 2, .dp = 8, .schedule = schedule::Kind::ZeroBubbleH1});
  EXPECT_GT(zb.buffers, f1b.buffers);
}

}  // namespace
}  // namespace weft::planner
