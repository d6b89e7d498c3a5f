#include "weft/parallel/tp_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "weft/core/check.h"

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

namespace {
// Real (non-padding) local columns: global index < V.
int64_t real_columns(int64_t V, int64_t v0, int64_t Vl) {
  return std::clamp<int64_t>(V - v0, 0, Vl);
}
}  // namespace

void vocab_parallel_cross_entropy_forward(comm::Communicator& tp, float* losses, float* stats,
                                          const float* logits_local, const int32_t* targets, int N,
                                          int64_t V, int64_t v0, int64_t Vl) {
  const int64_t real = real_columns(V, v0, Vl);
  float* max = stats;      // [N]
  float* sum = stats + N;  // [N]
  std::vector<float> target_logit(N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* z = logits_local + int64_t{n} * Vl;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < real; ++j) m = std::max(m, z[j]);
    max[n] = m;
  }
  tp.all_reduce(max, N, comm::ReduceOp::Max);
  // One Sum all-reduce for both: [sum of exp | target logit] (the target's rank contributes it).
  std::vector<float> sums(2 * int64_t{N});
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* z = logits_local + int64_t{n} * Vl;
    float s = 0.0f;
    for (int64_t j = 0; j < real; ++j) s += std::exp(z[j] - max[n]);
    const int64_t y = int64_t{targets[n]} - v0;
    sums[n] = s;
    sums[N + n] = (y >= 0 && y < Vl) ? z[y] : 0.0f;
  }
  tp.all_reduce(sums.data(), 2 * int64_t{N});
  for (int n = 0; n < N; ++n) {
    WEFT_CHECK(targets[n] < V, "target ", targets[n], " at row ", n, " is not below V=", V);
    sum[n] = sums[n];
    losses[n] = targets[n] < 0 ? 0.0f : std::log(sums[n]) + max[n] - sums[N + n];
  }
}

void vocab_parallel_cross_entropy_backward(float* logits_local, const float* stats,
                                           const int32_t* targets, float dloss, int N, int64_t V,
                                           int64_t v0, int64_t Vl) {
  const int64_t real = real_columns(V, v0, Vl);
  const float* max = stats;
  const float* sum = stats + N;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* z = logits_local + int64_t{n} * Vl;  // [Vl]; becomes the gradient
    if (targets[n] < 0) {
      std::fill(z, z + Vl, 0.0f);
      continue;
    }
    const float f = dloss / sum[n];
    for (int64_t j = 0; j < real; ++j) z[j] = std::exp(z[j] - max[n]) * f;
    std::fill(z + real, z + Vl, 0.0f);
    const int64_t y = int64_t{targets[n]} - v0;
    if (y >= 0 && y < Vl) z[y] -= dloss;
  }
}

}  // namespace weft::parallel
