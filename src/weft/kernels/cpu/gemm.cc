// Row-major SGEMM through oneDNN's dnnl_sgemm (docs/gemm-backend.md records why oneDNN).
// oneDNN shares the OpenMP pool; called inside an OpenMP parallel region it runs single-threaded,
// which the attention kernels use for their per-(batch, head) GEMMs.

#include "weft/kernels/gemm.h"

#include <dnnl.h>

#include "weft/core/check.h"

namespace weft::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  WEFT_CHECK(M >= 0 && N >= 0 && K >= 0, "sgemm: negative size M=", M, " N=", N, " K=", K);
  if (M == 0 || N == 0) return;
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha,
                                          A, lda, B, ldb, beta, C, ldc);
  WEFT_CHECK(status == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(status),
             " (trans_a=", trans_a, " trans_b=", trans_b, " M=", M, " N=", N, " K=", K,
             " lda=", lda, " ldb=", ldb, " ldc=", ldc, ")");
}

}  // namespace weft::kernels
