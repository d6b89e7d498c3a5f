#include "weft/model/param_layout.h"

#include <gtest/gtest.h>

#include <cmath>

#include "weft/core/rng.h"
#include "weft/model/activation_layout.h"
#include "weft/model/memory.h"

using namespace weft::model;

namespace {
GptConfig gpt2_small() { return GptConfig{"gpt2-124m", 12, 768, 12, 50257, 128, 1024}; }
GptConfig tiny() { return GptConfig{"tiny", 2, 32, 4, 61, 16, 16}; }
}  // namespace

TEST(ParamLayout, Gpt2SmallHasTheKnownParameterCount) {
  // wte 50304*768 + wpe 1024*768 + 12 layers * (12 C^2 + 13 C) + ln_f 2C
  EXPECT_EQ(gpt_param_layout(gpt2_small()).count(), 124475904);
}

TEST(ParamLayout, SlicesAreAlignedAndNamedAfterGpt2Modules) {
  auto p = gpt_param_layout(tiny());
  for (const auto& s : p.buffer.slices()) EXPECT_EQ(s.offset % 16, 0) << s.name;
  EXPECT_EQ(p.buffer.at("h.1.attn.qkv.weight").shape, (weft::Shape{96, 32}));
  EXPECT_EQ(p.buffer.at("wte").shape, (weft::Shape{64, 32}));
}

TEST(ParamLayout, InitialValuesDependOnlyOnSeedNameAndIndex) {
  auto p = gpt_param_layout(tiny());
  weft::FlatBuffer a(p.buffer);
  init_params(a, p, 7);
  const auto& s = p.buffer.at("h.1.mlp.fc.weight");
  for (int64_t i : {int64_t{0}, int64_t{5}, int64_t{1000}, s.numel - 1}) {
    EXPECT_EQ(a.data()[s.offset + i], 0.02f * weft::normal_at(weft::stream_key(7, s.name), i));
  }
  const float residual_std = 0.02f / std::sqrt(4.0f);
  const auto& proj = p.buffer.at("h.0.mlp.proj.weight");
  EXPECT_EQ(a.data()[proj.offset + 3],
            residual_std * weft::normal_at(weft::stream_key(7, proj.name), 3));
  EXPECT_EQ(a.ptr("h.0.ln_1.weight")[5], 1.0f);
  EXPECT_EQ(a.ptr("h.0.attn.qkv.bias")[5], 0.0f);
}

TEST(ParamLayout, VocabularyPaddingRowsStartAtZero) {
  auto p = gpt_param_layout(tiny());
  weft::FlatBuffer a(p.buffer);
  init_params(a, p, 7);
  const float* wte = a.ptr("wte");
  for (int64_t i = 61 * 32; i < 64 * 32; ++i) EXPECT_EQ(wte[i], 0.0f);
  EXPECT_NE(wte[60 * 32], 0.0f);
}

TEST(ActivationLayout, RecomputationShrinksSavedActivations) {
  auto none = gpt_activation_layout(gpt2_small(), 8, 256, Recompute::None).total();
  auto selective = gpt_activation_layout(gpt2_small(), 8, 256, Recompute::Selective).total();
  auto full = gpt_activation_layout(gpt2_small(), 8, 256, Recompute::Full).total();
  EXPECT_LT(selective, none);
  EXPECT_LT(full, selective);
  // selective drops 11 of 12 layers' B*NH*T*T attention probabilities
  EXPECT_EQ(none - selective, 11LL * 8 * 12 * 256 * 256);
}

TEST(MemoryEstimate, CountsParamsGradsAndTwoMoments) {
  auto m = estimate_training_memory(tiny(), 2, 8, Recompute::None, 2);
  EXPECT_EQ(m.grads, m.params);
  EXPECT_EQ(m.optimizer, 2 * m.params);
  EXPECT_GT(m.activations, 0);
  EXPECT_EQ(m.total(), m.params * 4 + m.activations + m.workspace);
}
