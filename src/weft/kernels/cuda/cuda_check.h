#pragma once
// WEFT_CUDA_CHECK(call): every CUDA runtime call of the CUDA backend goes through it. A failure
// throws weft::Error naming the call, file:line and CUDA's own message, e.g.
//   src/weft/kernels/cuda/arena.cc:61: CUDA error: cudaMalloc(&base_, bytes): out of memory
//   (cudaErrorMemoryAllocation)
// WEFT_CUDA_CHECK_LAUNCH() follows every <<<...>>> launch: it reports a bad launch configuration
// (and any earlier asynchronous fault) at the launch that hit it rather than at some later call.
// Only sources that talk to CUDA directly include this header (it includes cuda_runtime_api.h);
// the public headers (kernels_cuda.h, arena.h, context.h) do not.

#include <cuda_runtime_api.h>

#include "weft/core/check.h"

namespace weft::kernels::cuda::detail {
[[noreturn]] void cuda_failed(cudaError_t err, const char* call, const char* file, int line);
}  // namespace weft::kernels::cuda::detail

#define WEFT_CUDA_CHECK(call)                                                                \
  do {                                                                                       \
    const cudaError_t weft_cuda_err_ = (call);                                               \
    if (weft_cuda_err_ != cudaSuccess) {                                                     \
      ::weft::kernels::cuda::detail::cuda_failed(weft_cuda_err_, #call, __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)

#define WEFT_CUDA_CHECK_LAUNCH() WEFT_CUDA_CHECK(cudaGetLastError())
