#pragma once
// Model FLOPs of one training step: the PTD-P paper's Eq. 3 (Narayanan et al., SC'21), one formula
// shared by the runtime's MFU report and the planner.
//   without recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
//   full recomputation:    96 B s l h^2 (1 + s/(6h) + V/(16 l h))
// B global batch (sequences), s sequence length, l layers, h hidden size, V padded vocabulary.
// MFU always uses the first (model FLOPs exclude recomputation); the second counts the hardware
// FLOPs of a fully recomputed step and belongs to the planner when it prices recomputation.

#include "weft/model/gpt_config.h"

namespace weft::model {

inline double model_flops_per_step(const GptConfig& c, double B, double s) {
  const double l = c.n_layer, h = c.n_embd, V = c.padded_vocab();
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

}  // namespace weft::model
