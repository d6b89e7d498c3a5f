#include "weft/model/param_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

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

// Elements of both blocks of an activation layout.
int64_t elements(const ActivationLayout& a) { return a.act.total() + a.f32.total(); }

TEST(ActivationLayout, RecomputationShrinksSavedActivations) {
  auto none = elements(gpt_activation_layout(gpt2_small(), 8, 256, Recompute::None));
  auto selective = elements(gpt_activation_layout(gpt2_small(), 8, 256, Recompute::Selective));
  auto full = elements(gpt_activation_layout(gpt2_small(), 8, 256, Recompute::Full));
  EXPECT_LT(selective, none);
  EXPECT_LT(full, selective);
  // selective drops every layer's B*NH*T*T attention probabilities from the slot (one layer's
  // live in the model's workspace)
  EXPECT_EQ(none - selective, 12LL * 8 * 12 * 256 * 256);
  const auto work = gpt_workspace_layout(gpt2_small(), 8, 256, Recompute::Selective);
  EXPECT_EQ(work.f32.at("layer.att").numel, 8 * 12 * 256 * 256);
}

TEST(ActivationLayout, FlashAttentionKeepsOnlyLogsumexpsAndSelectiveDropsNothing) {
  const Precision bf16 = Precision::BF16Mixed;
  const auto none = gpt_activation_layout(gpt2_small(), 8, 256, Recompute::None, {}, {}, bf16);
  const auto selective =
      gpt_activation_layout(gpt2_small(), 8, 256, Recompute::Selective, {}, {}, bf16);
  EXPECT_EQ(none.f32.at("h.0.att").numel, 8 * 12 * 256);
  EXPECT_EQ(elements(selective), elements(none));
  EXPECT_EQ(none.bytes(bf16),
            backend_block_bytes(none.act.total() * 2) + backend_block_bytes(none.f32.total() * 4));
}

TEST(MemoryEstimate, CountsParamsGradsAndTwoMoments) {
  auto m = estimate_rank_memory(tiny(), {.B = 2, .T = 8}, {}, {.threads = 2});
  EXPECT_EQ(m.grads, m.params);
  EXPECT_EQ(m.optimizer, 2 * m.params);
  EXPECT_GT(m.activations, 0);
  EXPECT_EQ(m.total(), m.params * 4 + m.activations + m.workspace + m.runtime);
}

TEST(TensorParallelLayout, ShardsTileEveryTensorExactlyOnce) {
  // Over the tp ranks, every global element of every tensor is held once (split tensors) or by
  // every rank (replicated ones), and the shards sum to the serial parameter count.
  const GptConfig cfg = tiny();
  const ParamLayout serial = gpt_param_layout(cfg);
  for (int tp : {2, 4}) {
    int64_t split_elements = 0, replicated_elements = 0;
    for (size_t i = 0; i < serial.buffer.slices().size(); ++i) {
      const int64_t numel = serial.buffer.slices()[i].numel;
      std::vector<int> hits(numel, 0);
      for (int r = 0; r < tp; ++r) {
        const ParamLayout local = gpt_param_layout(cfg, tp, r);
        int64_t covered = 0;
        for (const ShardRun& run : local.runs(i)) {
          for (int64_t k = 0; k < run.n; ++k) ++hits[run.global + k];
          covered += run.n;
        }
        EXPECT_EQ(covered, local.buffer.slices()[i].numel) << local.buffer.slices()[i].name;
      }
      const int expect = serial.splits[i].replicated() ? tp : 1;
      for (int64_t k = 0; k < numel; ++k) {
        ASSERT_EQ(hits[k], expect) << serial.buffer.slices()[i].name << " element " << k;
      }
      (serial.splits[i].replicated() ? replicated_elements : split_elements) += numel;
    }
    EXPECT_EQ(split_elements + replicated_elements, serial.count());
  }
}

TEST(TensorParallelLayout, QkvShardsHoldTheirHeadsOfQueryKeyAndValue) {
  // tp=2, C=32, 4 heads: rank 1 holds rows [16,32) of q, [48,64) of k, [80,96) of v.
  const ParamLayout p = gpt_param_layout(tiny(), 2, 1);
  const size_t qkv = [&] {
    for (size_t i = 0; i < p.buffer.slices().size(); ++i) {
      if (p.buffer.slices()[i].name == "h.0.attn.qkv.weight") return i;
    }
    return size_t{0};
  }();
  EXPECT_EQ(p.buffer.slices()[qkv].shape, (weft::Shape{48, 32}));
  const auto runs = p.runs(qkv);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].global, 16 * 32);
  EXPECT_EQ(runs[1].global, 48 * 32);
  EXPECT_EQ(runs[2].global, 80 * 32);
  EXPECT_EQ(p.buffer.at("h.0.attn.proj.weight").shape, (weft::Shape{32, 16}));
  EXPECT_EQ(p.buffer.at("h.0.mlp.fc.weight").shape, (weft::Shape{64, 32}));
  EXPECT_EQ(p.buffer.at("wte").shape, (weft::Shape{32, 32}));
  EXPECT_EQ(p.buffer.at("h.0.ln_1.weight").shape, (weft::Shape{32}));
}

TEST(TensorParallelLayout, AShardInitializesToItsSliceOfTheSerialModel) {
  const GptConfig cfg = tiny();
  const ParamLayout serial = gpt_param_layout(cfg);
  weft::FlatBuffer whole(serial.buffer);
  init_params(whole, serial, 11);
  for (int r = 0; r < 4; ++r) {
    const ParamLayout local = gpt_param_layout(cfg, 4, r);
    weft::FlatBuffer shard(local.buffer);
    init_params(shard, local, 11);
    for (size_t i = 0; i < local.buffer.slices().size(); ++i) {
      for (const ShardRun& run : local.runs(i)) {
        for (int64_t k = 0; k < run.n; ++k) {
          ASSERT_EQ(shard.data()[local.buffer.slices()[i].offset + run.local + k],
                    whole.data()[serial.buffer.slices()[i].offset + run.global + k])
              << local.buffer.slices()[i].name << " rank " << r;
        }
      }
    }
  }
}

// ZeRO initializes only the parts a rank owns: any element range of any slice, tp-sharded or
// not (columns, q/k/v blocks, wte's zero padding rows), gets exactly init_params' values.
TEST(TensorParallelLayout, ARangeOfASliceInitializesAsTheWholeBuffer) {
  const GptConfig cfg = tiny();
  for (int r = 0; r < 2; ++r) {
    const ParamLayout layout = gpt_param_layout(cfg, 2, r);
    weft::FlatBuffer whole(layout.buffer);
    init_params(whole, layout, 5);
    for (size_t i = 0; i < layout.buffer.slices().size(); ++i) {
      const auto& sl = layout.buffer.slices()[i];
      for (const auto& [begin, n] : {std::pair<int64_t, int64_t>{0, sl.numel},
                                     {sl.numel / 3, sl.numel / 2},
                                     {sl.numel - 1, 1}}) {
        std::vector<float> part(static_cast<size_t>(n), -7.0f);
        init_slice(layout, i, 5, begin, n, part.data());
        for (int64_t k = 0; k < n; ++k) {
          ASSERT_EQ(part[static_cast<size_t>(k)], whole.data()[sl.offset + begin + k])
              << sl.name << " rank " << r << " [" << begin << ", +" << n << ")";
        }
      }
    }
  }
}

TEST(TensorParallelLayout, ValidationListsEverySplitThatFails) {
  GptConfig c = tiny();
  EXPECT_TRUE(validate_tensor_parallel(c, 4, true, 2, 8).ok());
  c.n_head = 6;
  c.n_embd = 30;
  c.pad_vocab_to = 1;  // Vp = 61
  const weft::Status s = validate_tensor_parallel(c, 4, true, 1, 3);
  ASSERT_EQ(s.problems().size(), 4u) << s.message();
  EXPECT_NE(s.message().find("n_head=6 is not divisible by tp=4"), std::string::npos);
  EXPECT_NE(s.message().find("n_embd=30 is not divisible by tp=4"), std::string::npos);
  EXPECT_NE(s.message().find("padded vocabulary 61"), std::string::npos);
  EXPECT_NE(s.message().find("1x3 = 3 tokens"), std::string::npos);
}

TEST(TensorParallelLayout, ActivationsShrinkAsTheSplitPredicts) {
  // Per layer, tp divides qkv, att, atty, fc, fc_gelu; sequence parallelism also divides the
  // residual stream (Korthikanti et al. 2022, Table 2).
  const GptConfig c = gpt2_small();
  const int64_t B = 4, T = 256, C = 768, NH = 12, L = 12;
  const auto none1 = elements(gpt_activation_layout(c, B, T, Recompute::None));
  const auto none2 = elements(gpt_activation_layout(c, B, T, Recompute::None, {2, false}));
  const auto sp2 = elements(gpt_activation_layout(c, B, T, Recompute::None, {2, true}));
  const int64_t split_per_layer = B * T * (3 * C + C + 8 * C) + B * NH * T * T;
  EXPECT_NEAR(static_cast<double>(none1 - none2),
              static_cast<double>(L * split_per_layer / 2 + B * T * 50304 / 2 - 9 * B * T),
              16.0 * 64 * L);
  EXPECT_LT(sp2, none2);
}
