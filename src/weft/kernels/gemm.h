#pragma once
// Row-major single-precision GEMM through oneDNN (docs/gemm-backend.md says why oneDNN):
// C[M,N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T.

#include <algorithm>
#include <cstdint>

namespace weft::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// How sgemm and sgemm_bf16 split a GEMM over the kernel threads (one slab each along C's longer
// side, in multiples of 16), which the memory model prices (model::gemm_packing_resident): GEMMs
// below kGemmMinSplitFlops flops run as one oneDNN call (a parallel region costs microseconds),
// and each thread's slab must be at least kGemmMinSlab long along the split side.
inline constexpr double kGemmMinSplitFlops = double{1 << 24};
inline constexpr int64_t kGemmMinSlab = 128;
// Whether C[M,N] (K deep) is split over `threads` threads (one slab each along max(M, N)).
inline bool gemm_splits(int64_t M, int64_t N, int64_t K, int threads) {
  return threads > 1 && 2.0 * M * N * K >= kGemmMinSplitFlops &&
         std::max(M, N) >= kGemmMinSlab * threads;
}
// Part `id` of `parts` near-equal parts of [0, extent): [begin, end), boundaries on multiples of
// 16 (a 64-byte line of fp32, so a thread's columns start on a vector boundary; one register tile
// of a transposed conversion).
struct Slab {
  int64_t begin, end;
};
inline Slab slab(int64_t extent, int id, int parts) {
  const int64_t units = (extent + 15) / 16;
  return {std::min(extent, units * id / parts * 16),
          std::min(extent, units * (id + 1) / parts * 16)};
}

// The same GEMM with A and B rounded to bfloat16 (round to nearest even) and the products
// accumulated in fp32 (C stays fp32), through oneDNN's bf16 matmul: about twice sgemm's rate on
// CPUs with avx512_bf16; on CPUs without oneDNN's bf16 matmul (below avx512_core) the rounded
// inputs go through sgemm instead: the same numbers at sgemm's rate. The linear layers use it
// under MatmulPrecision::BF16 (kernels.h).
// Relative error about 2^-8 (the input rounding). Threads may call it concurrently (per-thread
// scratch buffers, a locked primitive cache).
void sgemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                int64_t ldc);

// Which kernel sgemm_bf16 multiplies with: oneDNN's bf16 matmul (Native), or the rounded operands
// widened exactly to fp32 and multiplied by sgemm (Widened), which hosts without a oneDNN bf16
// matmul always take. Both are the same products accumulated in fp32.
enum class Bf16GemmPath { Native, Widened };
Bf16GemmPath bf16_gemm_path();
// Makes sgemm_bf16 take the widened path on every host (true), or the host's own again (false):
// so that tests exercise both paths wherever they run. Not to be called while another thread is
// inside sgemm_bf16.
void force_bf16_gemm_widened(bool widened);

}  // namespace weft::kernels
