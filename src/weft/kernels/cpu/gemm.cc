// Row-major SGEMM through oneDNN's dnnl_sgemm (docs/gemm-backend.md records why oneDNN).
// oneDNN shares the OpenMP pool; called inside an OpenMP parallel region it runs single-threaded,
// which the attention kernels use for their per-(batch, head) GEMMs.
//
// Outside a parallel region, a large GEMM is split here along the longer side of C into one
// contiguous slab per thread, each computed by a single-threaded dnnl_sgemm. Measured on 2 threads
// (AMD EPYC, GPT-2 124M linear shapes): never slower than oneDNN's own threading beyond noise,
// +3..8% on most N = 256 token shapes, and +38% on the fc-projection forward (M=256, N=768,
// K=3072), where oneDNN's own split reaches only ~145 GFLOP/s. Every element of C is computed by
// one thread in a fixed order, so results are deterministic for a fixed thread count.

#include "weft/kernels/gemm.h"
#include "weft/kernels/kernels.h"

#include <dnnl.h>
#include <omp.h>

#include <vector>

#include "weft/core/check.h"

namespace weft::kernels {
namespace {

char op(bool trans) { return trans ? 'T' : 'N'; }

void check_status(dnnl_status_t status, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  int64_t lda, int64_t ldb, int64_t ldc) {
  WEFT_CHECK(status == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(status),
             " (trans_a=", trans_a, " trans_b=", trans_b, " M=", M, " N=", N, " K=", K,
             " lda=", lda, " ldb=", ldb, " ldc=", ldc, ")");
}

}  // namespace

int64_t host_runtime_bytes() {
  const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core);
  return (isa & avx512) == avx512 ? kRuntimeBytesAvx512 : kRuntimeBytesAvx2;
}

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  WEFT_CHECK(M >= 0 && N >= 0 && K >= 0, "sgemm: negative size M=", M, " N=", N, " K=", K);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // C = beta C. oneDNN returns C unchanged for K = 0, whatever beta is.
    for (int64_t i = 0; i < M; ++i) {
      float* row = C + i * ldc;
      for (int64_t j = 0; j < N; ++j) row[j] = beta == 0.f ? 0.f : beta * row[j];
    }
    return;
  }

  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (!gemm_splits(M, N, K, threads)) {
    check_status(dnnl_sgemm(op(trans_a), op(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc),
                 trans_a, trans_b, M, N, K, lda, ldb, ldc);
    return;
  }

  const bool by_rows = M >= N;  // split the longer side of C
  std::vector<dnnl_status_t> status(static_cast<size_t>(threads), dnnl_success);
#pragma omp parallel num_threads(threads)
  {
    const int id = omp_get_thread_num();
    const auto [begin, end] = slab(by_rows ? M : N, id, omp_get_num_threads());
    if (end > begin) {
      dnnl_status_t s;
      if (by_rows) {  // C[begin:end, :] = op(A)[begin:end, :] op(B)
        const float* a = trans_a ? A + begin : A + begin * lda;
        s = dnnl_sgemm(op(trans_a), op(trans_b), end - begin, N, K, alpha, a, lda, B, ldb, beta,
                       C + begin * ldc, ldc);
      } else {  // C[:, begin:end] = op(A) op(B)[:, begin:end]
        const float* b = trans_b ? B + begin * ldb : B + begin;
        s = dnnl_sgemm(op(trans_a), op(trans_b), M, end - begin, K, alpha, A, lda, b, ldb, beta,
                       C + begin, ldc);
      }
      status[static_cast<size_t>(id)] = s;
    }
  }
  for (const dnnl_status_t s : status) check_status(s, trans_a, trans_b, M, N, K, lda, ldb, ldc);
}

}  // namespace weft::kernels
