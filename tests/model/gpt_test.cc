#include "weft/model/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "weft/core/check.h"

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

TEST(Gpt, GradientsAccumulateAcrossBackwardCalls) {
  Gpt gpt(tiny(), 2, 16);
  gpt.init(3);
  auto b = batch(2, 16, 61);
  gpt.zero_grad();
  gpt.forward(b.tokens.data(), b.targets.data(), 2, 16);
  gpt.backward(0.5f);
  gpt.forward(b.tokens.data(), b.targets.data(), 2, 16);
  gpt.backward(0.5f);
  std::vector<float> twice(gpt.grads().data(), gpt.grads().data() + gpt.grads().size());
  gpt.zero_grad();
  gpt.forward(b.tokens.data(), b.targets.data(), 2, 16);
  gpt.backward(1.0f);
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
    EXPECT_NE(m.find("sequence length 16 is larger than the position table"), std::string::npos) << m;
  }
}
