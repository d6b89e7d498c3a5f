#pragma once
// Launchers ops.cu provides to linear.cc (host code compiled without nvcc): the element-wise
// halves of the linear layer when cuBLASLt has no fused epilogue for a shape, and the bias
// gradient. All launches go to `stream`.

#include <cstdint>

#include "weft/core/dtype.h"
#include "weft/kernels/cuda/context.h"

namespace weft::kernels::cuda::detail {

// x = out (or pre, when pre is non-null) holds inp @ weight^T; adds bias[OC] (if non-null) in
// place, then with pre non-null writes out = gelu(pre).
void launch_bias_gelu(BF16* out, BF16* pre, const BF16* bias, int N, int OC, Stream stream);

// dinp[n] *= gelu'(pre[n]) in place.
void launch_gelu_backward_inplace(BF16* dinp, const BF16* pre, int64_t n, Stream stream);

// out[C] += sum over the N rows of x[N,C], deterministic (fixed row splits, fixed order).
void launch_column_sums(Context& ctx, float* out, const BF16* x, int N, int C);

}  // namespace weft::kernels::cuda::detail
