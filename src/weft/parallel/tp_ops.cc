#include "weft/parallel/tp_ops.h"

namespace weft::parallel {

void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* wte_local,
                                      const float* wpe, bool add_wpe, int B, int T, int C,
                                      int64_t v0, int64_t Vl) {
  const int64_t N = int64_t{B} * T;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* o = out + n * C;  // [C]
    const int64_t v = tokens[n] - v0;
    const float* p = wpe + (n % T) * C;  // [C]
    for (int c = 0; c < C; ++c) {
      const float e = (v >= 0 && v < Vl) ? wte_local[v * C + c] : 0.0f;
      o[c] = e + (add_wpe ? p[c] : 0.0f);
    }
  }
}

void vocab_parallel_embedding_backward(float* dwte_local, float* dwpe, const float* dout,
                                       const int32_t* tokens, int B, int T, int C, int64_t v0,
                                       int64_t Vl) {
  const int64_t N = int64_t{B} * T;
  // Each thread owns whole columns and walks the rows in order: deterministic, no races.
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    for (int64_t n = 0; n < N; ++n) {
      const float d = dout[n * C + c];
      const int64_t v = tokens[n] - v0;
      if (v >= 0 && v < Vl) dwte_local[v * C + c] += d;
      dwpe[(n % T) * C + c] += d;
    }
  }
}

}  // namespace weft::parallel
