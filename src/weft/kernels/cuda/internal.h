#pragma once
// Launchers ops.cu provides to linear.cc (host code compiled without nvcc): the element-wise
// halves of the linear layer when cuBLASLt has no fused epilogue for a shape, and the bias
// gradient. T is float, BF16 or F16; all launches go to `stream`.

#include <cstdint>

#include "weft/kernels/cuda/context.h"

namespace weft::kernels::cuda::detail {

// x = out (or pre, when pre is non-null) holds inp @ weight^T; adds bias[OC] (if non-null) in
// place, then with pre non-null writes out = gelu(pre).
template <typename T>
void launch_bias_gelu(T* out, T* pre, const T* bias, int N, int OC, Stream stream);

// dinp[n] *= gelu'(pre[n]) in place.
template <typename T>
void launch_gelu_backward_inplace(T* dinp, const T* pre, int64_t n, Stream stream);

// out[C] += sum over the N rows of x[N,C], deterministic (fixed row splits, fixed order).
template <typename T>
void launch_column_sums(Context& ctx, float* out, const T* x, int N, int C);

}  // namespace weft::kernels::cuda::detail
