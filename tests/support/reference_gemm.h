#pragma once
// The tests' reference GEMM, in double: C[M,N] = alpha op(A) op(B) + beta C, row-major with
// leading dimensions lda, ldb, ldc (op(X) = X^T when its flag is set), as kernels::sgemm takes
// them. op(A) and op(B)^T are first copied into contiguous [M,K] and [N,K] rows, so each output
// element is a dot product of two contiguous rows, and each copy reads its source in memory order:
// the strided loop it replaces took 200 s of the debug build's kernels_gemm_bf16_test (a cache miss
// per element under AddressSanitizer for a 20001 x 7 x 500 GEMM with A transposed).

#include <cstdint>
#include <vector>

namespace weft::test {

inline void reference_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                           const std::vector<float>& A, int64_t lda, const std::vector<float>& B,
                           int64_t ldb, double beta, std::vector<double>& C, int64_t ldc) {
  std::vector<double> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(N * K));
  // Each copy walks its source in memory order (a transposed operand row by row of the source).
  for (int64_t r = 0; r < (ta ? K : M); ++r) {
    for (int64_t c = 0; c < (ta ? M : K); ++c) {
      (ta ? a[c * K + r] : a[r * K + c]) = A[r * lda + c];
    }
  }
  for (int64_t r = 0; r < (tb ? N : K); ++r) {
    for (int64_t c = 0; c < (tb ? K : N); ++c) {
      (tb ? b[r * K + c] : b[c * K + r]) = B[r * ldb + c];
    }
  }
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += a[i * K + k] * b[j * K + k];
      C[i * ldc + j] = alpha * acc + beta * C[i * ldc + j];
    }
  }
}

}  // namespace weft::test
