#pragma once
// Model FLOPs of one training step, one formula shared by the runtime's MFU report and the
// planner. For GPT-2 it is the PTD-P paper's Eq. 3 (Narayanan et al., SC'21):
//   without recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
//   full recomputation:    96 B s l h^2 (1 + s/(6h) + V/(16 l h))
// B global batch (sequences), s sequence length, l layers, h hidden size, V padded vocabulary.
// MFU always uses the first (model FLOPs exclude recomputation); the others count the hardware
// FLOPs of a recomputed step and belong to the planner when it prices recomputation.
//
// The variants (gpt_config.h) change the GEMMs' shapes, so the formula is written from them, as
// Eq. 3 is derived (PTD-P §5.1): a GEMM [M, K] x [K, N] costs 2MNK; a layer's forward per token is
// 2 x (the weights of its linears) + the attention core's 2 x 2sh (scores Q K^T and context
// P V, over all s keys, as Eq. 3 counts them); backward costs twice the forward. Per layer the
// linears hold W = h (qkv_width + h + fc_width + F) weights (qkv_width = h + 2 NKV HS, fc_width F
// or 2F for SwiGLU); the LM head h V. So per token:
//   no recomputation:  6 l W + 12 l s h + 6 h V
//   selective:         + 4 l s h       (the attention core's forward again)
//   full:              8 l W + 16 l s h + 6 h V   (the layers' forward again; not the head's)
// GPT-2 (W = 12 h^2) gives 72 l h^2 + 12 l s h + 6 h V = 72 l h^2 (1 + s/(6h) + V/(12 l h)), and
// 96 l h^2 (1 + s/(6h) + V/(16 l h)) with full recomputation: Eq. 3. Grouped-query attention
// narrows the k and v projections but not the core (every query head still meets s keys); norms,
// activations, RoPE and the embedding lookup are not GEMMs and are not counted, as in Eq. 3.

#include "weft/model/gpt_config.h"
#include "weft/model/recompute.h"

namespace weft::model {

// W: the weights of one layer's four linears (attn.qkv, attn.proj, mlp.fc, mlp.proj).
inline double layer_linear_weights(const GptConfig& c) {
  const double h = c.n_embd;
  return h * (static_cast<double>(c.qkv_width()) + h + static_cast<double>(c.fc_width()) +
              static_cast<double>(c.ffn()));
}

// The GEMM FLOPs of one training step that runs `recompute` (see above).
inline double training_flops_per_step(const GptConfig& c, double B, double s, Recompute recompute) {
  const double l = c.n_layer, h = c.n_embd, V = c.padded_vocab(), W = layer_linear_weights(c);
  const double passes = recompute == Recompute::Full ? 4 : 3;  // forward-sized passes per layer
  const double attention = (recompute == Recompute::None ? 12.0 : 16.0) * l * s * h;
  return B * s * (2 * passes * l * W + attention + 6 * h * V);
}

inline double model_flops_per_step(const GptConfig& c, double B, double s) {
  return training_flops_per_step(c, B, s, Recompute::None);
}

}  // namespace weft::model
