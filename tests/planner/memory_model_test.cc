#include <gtest/gtest.h>

#include "weft/planner/memory_model.h"

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

TEST(ModelState, BytesPerParameterFollowThePrecision) {
  const MemoryBreakdown fp32 = model_state_bytes(1000, Precision::FP32, 0, 1);
  EXPECT_EQ(fp32.weights + fp32.grads + fp32.optimizer, 16 * 1000);
  const MemoryBreakdown mixed = model_state_bytes(1000, Precision::BF16Mixed, 0, 1);
  EXPECT_EQ(mixed.weights, 2 * 1000);
  EXPECT_EQ(mixed.grads, 4 * 1000);
  EXPECT_EQ(mixed.optimizer, 12 * 1000);
}

TEST(ModelState, EachZeroStageShardsOneMoreTerm) {
  const int dp = 8;
  const MemoryBreakdown z0 = model_state_bytes(8000, Precision::BF16Mixed, 0, dp);
  const MemoryBreakdown z1 = model_state_bytes(8000, Precision::BF16Mixed, 1, dp);
  const MemoryBreakdown z2 = model_state_bytes(8000, Precision::BF16Mixed, 2, dp);
  const MemoryBreakdown z3 = model_state_bytes(8000, Precision::BF16Mixed, 3, dp);
  EXPECT_EQ(z1.optimizer, z0.optimizer / dp);
  EXPECT_EQ(z1.grads, z0.grads);
  EXPECT_EQ(z2.grads, z0.grads / dp);
  EXPECT_EQ(z2.weights, z0.weights);
  EXPECT_EQ(z3.weights, z0.weights / dp);
  EXPECT_EQ(z3.total(), z0.total() / dp);
}

TEST(Activations, KorthikantiFormulasPerLayer) {
  const Job j = gpt();
  const double s = 2048, b = 2, h = 2048, a = 16, sbh = s * b * h;
  ParallelConfig c{.tp = 1, .pp = 1, .dp = 16, .micro_batch = 2};
  EXPECT_DOUBLE_EQ(layer_activation_bytes(j, c), sbh * (34 + 5 * a * s / h));
  c.tp = 4;
  c.dp = 4;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(j, c), sbh * (10 + 24 / 4.0 + 5 * a * s / (h * 4)));
  c.recompute = model::Recompute::Selective;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(j, c), sbh * (10 + 24 / 4.0));
  c.recompute = model::Recompute::Full;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(j, c), 2 * sbh);
  // fp32 activations: twice the bytes.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(gpt(Precision::FP32), c), 4 * sbh);
}

TEST(Activations, SequenceParallelismDividesEveryTermByT) {
  const Job j = gpt();
  for (model::Recompute r :
       {model::Recompute::None, model::Recompute::Selective, model::Recompute::Full}) {
    ParallelConfig c{.tp = 1, .pp = 1, .dp = 16, .micro_batch = 1, .recompute = r};
    const double serial = layer_activation_bytes(j, c);
    c.tp = 8;
    c.dp = 2;
    c.sequence_parallel = true;
    EXPECT_DOUBLE_EQ(layer_activation_bytes(j, c), serial / 8) << model::recompute_name(r);
  }
}

TEST(PeakMemory, ActivationsScaleWithTheScheduleInFlight) {
  const Job j = gpt();
  ParallelConfig c{.tp = 1, .pp = 4, .dp = 4, .micro_batch = 1};
  const std::vector<int> flight = in_flight(c, j);  // 1F1B: p - r
  EXPECT_EQ(flight, (std::vector<int>{4, 3, 2, 1}));
  c.schedule = schedule::Kind::GPipe;
  EXPECT_EQ(in_flight(c, j), (std::vector<int>{16, 16, 16, 16}));  // m = 64 / (4*1)
  c.schedule = schedule::Kind::OneFOneB;
  const MemoryBreakdown m = peak_memory(j, c, flight);
  const double per_layer = layer_activation_bytes(j, c);
  // Rank 0 holds 4 microbatches of its 6 layers, plus the embedding outputs.
  EXPECT_NEAR(m.activations, 4 * 6 * per_layer + 4 * 2048.0 * 2048 * 2, 1);
}

}  // namespace
}  // namespace weft::planner
