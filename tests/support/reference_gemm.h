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
  std::vector<double> a_rows(static_cast<size_t>(M * K)), b_rows(static_cast<size_t>(N * K));
  // Raw pointers: test code compiles at -O0 (tests/CMakeLists.txt), where each vector index is a
  // call.
  double *a = a_rows.data(), *b = b_rows.data(), *c = C.data();
  const float *src_a = A.data(), *src_b = B.data();
  // Each copy walks its source in memory order (a transposed operand row by row of the source).
  for (int64_t r = 0; r < (ta ? K : M); ++r) {
    for (int64_t col = 0; col < (ta ? M : K); ++col) {
      (ta ? a[col * K + r] : a[r * K + col]) = src_a[r * lda + col];
    }
  }
  for (int64_t r = 0; r < (tb ? N : K); ++r) {
    for (int64_t col = 0; col < (tb ? K : N); ++col) {
      (tb ? b[r * K + col] : b[col * K + r]) = src_b[r * ldb + col];
    }
  }
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      const double* x = a + i * K;
      const double* y = b + j * K;
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += x[k] * y[k];
      c[i * ldc + j] = alpha * acc + beta * c[i * ldc + j];
    }
  }
}

}  // namespace weft::test
