#include "weft/model/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "weft/core/check.h"
#include "weft/kernels/kernels.h"
#include "weft/optim/adamw.h"

using namespace weft::model;

namespace {
GptConfig tiny() { return GptConfig{"tiny", 3, 32, 4, 61, 16, 16}; }

struct Batch {
  std::vector<int32_t> tokens, targets;
};
Batch batch(int B, int T, int V) {
  Batch b;
  for (int i = 0; i < B * T; ++i) {
    b.tokens.push_back((i * 7 + 3) % V);
    b.targets.push_back((i * 13 + 1) % V);
  }
  return b;
}

std::vector<float> grads_after_step(Recompute r) {
  Gpt gpt(tiny(), 2, 16, r);
  gpt.init(5);
  auto b = batch(2, 16, 61);
  gpt.zero_grad();
  gpt.forward(b.tokens.data(), b.targets.data(), 2, 16);
  gpt.backward();
  return std::vector<float>(gpt.grads().data(), gpt.grads().data() + gpt.grads().size());
}
}  // namespace

TEST(Gpt, InitialLossIsNearLogVocabulary) {
  Gpt gpt(tiny(), 2, 16);
  gpt.init(1);
  auto b = batch(2, 16, 61);
  float loss = gpt.forward(b.tokens.data(), b.targets.data(), 2, 16);
  EXPECT_NEAR(loss, std::log(61.0f), 0.1f);
}

TEST(Gpt, RecomputationGivesBitIdenticalGradients) {
  auto none = grads_after_step(Recompute::None);
  auto selective = grads_after_step(Recompute::Selective);
  auto full = grads_after_step(Recompute::Full);
  ASSERT_EQ(none.size(), full.size());
  EXPECT_EQ(std::memcmp(none.data(), selective.data(), none.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(none.data(), full.data(), none.size() * sizeof(float)), 0);
}

TEST(Gpt, DeferredWeightGradientsEqualTheFullBackward) {
  // A zero-bubble schedule's I pass (input gradients) then W pass (weight gradients), on two
  // slots interleaved as a pipeline would run them: the same bits as the plain backward.
  auto b = batch(2, 16, 61);
  Gpt whole(tiny(), 2, 16), split(tiny(), 2, 16, Recompute::Selective, {}, {}, 2);
  whole.init(5);
  split.init(5);
  for (Gpt* g : {&whole, &split}) g->zero_grad();
  whole.forward(b.tokens.data(), b.targets.data(), 2, 16, 0, 0.5f);
  whole.backward();
  whole.forward(b.targets.data(), b.tokens.data(), 2, 16, 0, 0.5f);
  whole.backward();
  split.forward(b.tokens.data(), b.targets.data(), 2, 16, 0, 0.5f);
  split.forward(b.targets.data(), b.tokens.data(), 2, 16, 1, 0.5f);
  split.backward(0, /*defer_weight_grads=*/true);
  split.backward_weights(0);
  split.backward(1, /*defer_weight_grads=*/true);
  EXPECT_THROW(split.forward(b.tokens.data(), b.targets.data(), 2, 16, 1), weft::Error);
  split.backward_weights(1);
  EXPECT_EQ(
      std::memcmp(whole.grads().data(), split.grads().data(), whole.grads().size() * sizeof(float)),
      0);
}

TEST(Gpt, GradientsAccumulateAcrossBackwardCalls) {
  Gpt gpt(tiny(), 2, 16);
  gpt.init(3);
  auto b = batch(2, 16, 61);
  gpt.zero_grad();
  gpt.forward(b.tokens.data(), b.targets.data(), 2, 16, 0, 0.5f);
  gpt.backward();
  gpt.forward(b.tokens.data(), b.targets.data(), 2, 16, 0, 0.5f);
  gpt.backward();
  std::vector<float> twice(gpt.grads().data(), gpt.grads().data() + gpt.grads().size());
  gpt.zero_grad();
  gpt.forward(b.tokens.data(), b.targets.data(), 2, 16);
  gpt.backward();
  for (size_t i = 0; i < twice.size(); ++i) {
    ASSERT_NEAR(twice[i], gpt.grads().data()[i], 1e-6f * (1 + std::abs(twice[i]))) << i;
  }
}

TEST(Gpt, SmallerBatchThanAllocatedRunsAndMatchesAFreshModel) {
  Gpt big(tiny(), 4, 16), small(tiny(), 1, 8);
  big.init(9);
  small.init(9);
  auto b = batch(1, 8, 61);
  EXPECT_EQ(big.forward(b.tokens.data(), b.targets.data(), 1, 8),
            small.forward(b.tokens.data(), b.targets.data(), 1, 8));
}

TEST(Gpt, RejectsTokensOutsideTheVocabularyAndOversizedBatches) {
  Gpt gpt(tiny(), 1, 8);
  auto b = batch(1, 8, 61);
  b.tokens[2] = 61;
  EXPECT_THROW(gpt.forward(b.tokens.data(), b.targets.data(), 1, 8), weft::Error);
  EXPECT_THROW(gpt.forward(b.tokens.data(), b.targets.data(), 2, 8), weft::Error);
}

TEST(Gpt, InvalidConfigIsRejectedBeforeAllocation) {
  GptConfig bad{"bad", 0, 30, 4, 61, 16, 8};
  try {
    Gpt gpt(bad, 1, 16);
    FAIL() << "expected an error";
  } catch (const weft::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("n_layer=0 must be > 0"), std::string::npos) << m;
    EXPECT_NE(m.find("n_embd=30 is not divisible by n_head=4"), std::string::npos) << m;
    EXPECT_NE(m.find("sequence length 16 is larger than the position table"), std::string::npos)
        << m;
  }
}

// Mixed precision (kernels.h, MatmulPrecision::BF16: the linear layers' GEMM inputs in bf16, all
// else fp32) gives the fp32 loss to bf16 accuracy and trains: AdamW on a fixed batch lowers the
// loss.
TEST(Gpt, Bf16MatmulPrecisionMatchesF32LossAndTrains) {
  using weft::kernels::MatmulPrecision;
  auto b = batch(2, 16, 61);
  auto train = [&](MatmulPrecision p) {
    weft::kernels::set_matmul_precision(p);
    Gpt gpt(tiny(), 2, 16);
    gpt.init(11);
    weft::optim::AdamW opt(gpt.param_layout().buffer, gpt.param_layout().weight_decay_flags());
    std::vector<float> losses;
    for (int step = 0; step < 21; ++step) {
      gpt.zero_grad();
      losses.push_back(gpt.forward(b.tokens.data(), b.targets.data(), 2, 16));
      gpt.backward();
      opt.step(gpt.params(), gpt.grads(), 1e-2f);
    }
    weft::kernels::set_matmul_precision(MatmulPrecision::F32);
    return losses;
  };
  const std::vector<float> f32 = train(MatmulPrecision::F32);
  const std::vector<float> bf16 = train(MatmulPrecision::BF16);
  EXPECT_NEAR(bf16[0], f32[0], 2e-2f * f32[0]);
  EXPECT_NE(bf16[0], f32[0]) << "identical losses: the bf16 GEMMs did not run";
  EXPECT_LT(f32.back(), 0.5f * f32[0]);
  EXPECT_LT(bf16.back(), 0.5f * bf16[0]);
}
