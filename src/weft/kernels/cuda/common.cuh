#pragma once
// Device helpers shared by the .cu files: weft's bf16 storage type to CUDA's, conversions,
// the warp sum, GeLU, launch arithmetic.

#include <cuda_bf16.h>

#include <cstdint>

#include "weft/core/dtype.h"

namespace weft::kernels::cuda::detail {

static_assert(sizeof(BF16) == sizeof(__nv_bfloat16), "weft's bf16 must have CUDA's layout");

// weft's storage type -> CUDA's (float stays float).
template <typename T>
struct DeviceType {
  using type = T;
};
template <>
struct DeviceType<BF16> {
  using type = __nv_bfloat16;
};
template <typename T>
using device_t = typename DeviceType<T>::type;

template <typename T>
__host__ __device__ __forceinline__ device_t<T>* dev(T* p) {
  return reinterpret_cast<device_t<T>*>(p);
}
template <typename T>
__host__ __device__ __forceinline__ const device_t<T>* dev(const T* p) {
  return reinterpret_cast<const device_t<T>*>(p);
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// GeLU, tanh approximation (Hendrycks & Gimpel 2016), as ref::gelu_forward / gelu_backward.
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
__device__ __forceinline__ float gelu(float x) {
  const float u = kGeluK * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kGeluK * (x + 0.044715f * x * x * x);
  const float th = tanhf(u);
  const float du_dx = kGeluK * (1.f + 3.f * 0.044715f * x * x);
  return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * du_dx;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid of a grid-stride element-wise kernel: enough blocks to fill any current GPU, a fixed
// function of n (never of the device) so reductions built on it are reproducible everywhere.
constexpr int kElementwiseThreads = 256;
inline unsigned elementwise_blocks(int64_t n) {
  const int64_t blocks = ceil_div(n, kElementwiseThreads * 4);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 8192 ? 8192 : blocks));
}

}  // namespace weft::kernels::cuda::detail
