// The FLOPs of a training step (model/flops.h): exactly the PTD-P paper's Eq. 3 for GPT-2 configs,
// and for the variants the sum of the GEMMs the model issues (model/gemm_shapes.h).

#include "weft/model/flops.h"

#include <gtest/gtest.h>

#include "weft/model/gemm_shapes.h"

namespace weft::model {
namespace {

GptConfig gpt2(int L, int C, int NH, int V, int S) {
  return {.name = "g",
          .n_layer = L,
          .n_embd = C,
          .n_head = NH,
          .vocab_size = V,
          .pad_vocab_to = 128,
          .max_seq_len = S};
}

// Eq. 3 as the paper writes it (Narayanan et al., SC'21).
double eq3(const GptConfig& c, double B, double s, double k) {
  const double l = c.n_layer, h = c.n_embd, V = c.padded_vocab();
  return k * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / ((k == 72 ? 12.0 : 16.0) * l * h));
}

TEST(Flops, Gpt2ConfigsGiveEq3) {
  for (const GptConfig& c :
       {gpt2(12, 768, 12, 50257, 1024), gpt2(96, 12288, 96, 50257, 2048), gpt2(2, 32, 4, 61, 16)}) {
    for (double s : {16.0, 1024.0, 2048.0}) {
      const double B = 512;
      EXPECT_NEAR(model_flops_per_step(c, B, s) / eq3(c, B, s, 72), 1.0, 1e-12);
      EXPECT_NEAR(training_flops_per_step(c, B, s, Recompute::Full) / eq3(c, B, s, 96), 1.0, 1e-12);
      // Selective recomputation runs the attention core's forward again: 4 B s^2 h per layer.
      EXPECT_NEAR(training_flops_per_step(c, B, s, Recompute::Selective) /
                      (eq3(c, B, s, 72) + 4 * B * s * s * c.n_layer * c.n_embd),
                  1.0, 1e-12);
    }
  }
}

// The sum over the GEMMs of one step (forward, input and weight gradients of each linear) plus
// the attention core's 3 x 2 x 2 B s^2 h per layer.
double gemm_sum(const GptConfig& c, int B, int T) {
  double f = 0;
  for (const GemmShape& g : training_gemm_shapes(c, B, T)) f += g.flops();
  return f + 12.0 * B * T * T * c.n_layer * c.n_embd;
}

TEST(Flops, EveryVariantCountsTheGemmsItsModelIssues) {
  GptConfig base = gpt2(4, 64, 8, 500, 32);
  base.pad_vocab_to = 64;
  std::vector<GptConfig> variants;
  for (int kv : {0, 4, 2, 1}) {
    for (MlpKind mlp : {MlpKind::Gelu, MlpKind::SwiGLU}) {
      for (int F : {0, 96}) {
        GptConfig c = base;
        c.n_kv_head = kv;
        c.mlp = mlp;
        c.ffn_hidden_size = F;
        c.position = kv == 2 ? Position::Rope : Position::Learned;
        c.norm = F == 96 ? NormKind::RMSNorm : NormKind::LayerNorm;
        c.tie_embeddings = mlp == MlpKind::Gelu;
        c.bias = kv != 1;
        variants.push_back(c);
      }
    }
  }
  for (const GptConfig& c : variants) {
    ASSERT_TRUE(validate(c).ok()) << validate(c).message();
    EXPECT_NEAR(model_flops_per_step(c, 3, 32) / gemm_sum(c, 3, 32), 1.0, 1e-12)
        << "kv " << c.n_kv_head << " mlp " << mlp_name(c.mlp) << " F " << c.ffn();
  }
  // Grouped-query attention narrows k and v only: MHA minus 2 (NH - NKV) HS C per token, x 6.
  GptConfig mha = base, gqa = base;
  gqa.n_kv_head = 2;
  const double per_token = 6.0 * base.n_layer * 2 * (8 - 2) * 8 * 64;
  EXPECT_DOUBLE_EQ(model_flops_per_step(mha, 1, 32) - model_flops_per_step(gqa, 1, 32),
                   32 * per_token);
  // SwiGLU with F = 8C/3 (Shazeer 2020's choice to keep the cost): gate, up and down hold 3 F C =
  // 8 C^2 weights, as GeLU's fc and proj of 4C do.
  GptConfig gelu = base, swiglu = base;
  gelu.n_embd = swiglu.n_embd = 96;
  swiglu.mlp = MlpKind::SwiGLU;
  swiglu.ffn_hidden_size = 8 * 96 / 3;
  EXPECT_DOUBLE_EQ(layer_linear_weights(swiglu), layer_linear_weights(gelu));
  EXPECT_DOUBLE_EQ(layer_linear_weights(gelu), 12.0 * 96 * 96);
}

}  // namespace
}  // namespace weft::model
