#pragma once
// The GEMMs of one training step of a GPT (forward and backward, no recomputation), as the
// kernels issue them: out = inp @ W^T, dinp = dout @ W, dW += dout^T @ inp. The benchmark times
// exactly these shapes to measure the machine's GEMM ceiling for this model.

#include <cstdint>
#include <string>
#include <vector>

#include "weft/model/gpt_config.h"

namespace weft::model {

struct GemmShape {
  std::string name;  // "h.qkv.fwd", "lm_head.dw", ...
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  int count = 1;  // how many times per step (L for per-layer GEMMs)
  double flops() const { return 2.0 * M * N * K * count; }
};

std::vector<GemmShape> training_gemm_shapes(const GptConfig& cfg, int B, int T);

}  // namespace weft::model
