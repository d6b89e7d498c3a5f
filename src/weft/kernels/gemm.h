#pragma once
// Row-major single-precision GEMM through oneDNN (docs/gemm-backend.md says why oneDNN):
// C[M,N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T.

#include <cstdint>

namespace weft::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace weft::kernels
