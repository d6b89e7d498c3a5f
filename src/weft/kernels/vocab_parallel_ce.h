#pragma once
// The vocabulary-parallel cross-entropy (Megatron-LM, Shoeybi et al. 2019, §3): the ONE algorithm
// every backend runs (kernels/backend.h: cross_entropy_shard_stats and _finish),
// and the arithmetic on its statistics, written once here for the host and the CUDA kernels
// (kernels/cuda/ops.cu includes this header; __CUDACC__ makes the functions __host__ __device__;
// the host's row loops are cpu/host_backend.h's).
//
// Rank r of a tp group of size t holds columns [v0, v0 + Vl) of the padded vocabulary's logits,
// the first Vv = max(0, min(Vl, V - v0)) of them real. Per row n:
//   1. stats[n] = {m, s, z_y}: over the Vv real columns the max m and s = sum exp(x - m) (m = -inf,
//      s = 0 when Vv = 0), and the target's logit when this rank holds it (else 0);
//   2. one all-gather over tp: all_stats[t, N, 3], rank order;
//   3. totals(): M = max_r m_r, S = sum_r s_r exp(m_r - M) in rank order, z_y = sum_r z_y,r; the
//      loss is (M - z_y) + log(S) and the logits' gradient dloss * (exp(x - M) / S - onehot).
// The logits are never gathered, and the backward communicates nothing.
//
// Why one all-gather of three statistics and not Megatron's all-reduce of the row maxima (Max, N
// floats) followed by an all-reduce of the sums and target logits (Sum, 2N floats): per rank and
// row, in bytes sent (ring algorithms, fp32 statistics), with the number of sequential
// collectives and latency steps (ring / tree or recursive doubling):
//   all-reduce Max N + Sum 2N:  2 (t-1)/t * 12 = 24 (t-1)/t bytes;  2 collectives, the second
//                               waiting for the first: 4 (t-1) ring or 4 log2(t) tree steps
//   all-gather of 3:            (t-1) * 12 bytes;                     1 collective: (t-1) ring or
//                               log2(t) steps
//   t = 2: 12 vs 12 B/row (equal), 4 vs 1 steps;  t = 4: 18 vs 36 B/row, 8 vs 2 steps (tree);
//   t = 8: 21 vs 84 B/row, 12 vs 3 steps.
// The two all-reduces send less from t = 3 on; the all-gather pays one latency instead of two
// dependent ones. With the planner's own cost (planner/cost_model.cc: collective_time, the min of
// ring and tree; configs/clusters/h200.toml inside a node: alpha = 3 us, 1/beta = 360 GB/s), at
// t = 8 the all-reduces take 24 N beta + 12 alpha and the all-gather 84 N beta + 3 alpha: the
// all-gather is faster while N < 9 alpha / (60 beta) = 160k rows (at t = 4 while N < 540k; at
// t = 2 always). At N = b*s = 8192 rows and t = 8: 11 us against 37 us. A microbatch has a few
// thousand to tens of thousands of rows (at 160k rows the [N, Vp/8] bf16 logits alone would be
// about 2 GB per rank), so the all-gather is the cheaper algorithm in every layout weft runs. It
// also reads the logits once before the exchange instead of twice (max and sum together), and
// synchronizes a device with its communicator once instead of twice.
// The planner's communication volume (planner/comm_volume.cc) prices exactly this exchange: one
// all-gather of 3*b*s*t elements (the gathered output) per microbatch on the last stage.

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define WEFT_VOCAB_CE_HD __host__ __device__ __forceinline__
#else
#define WEFT_VOCAB_CE_HD inline
#endif

namespace weft::kernels::vocab_ce {

inline constexpr int kStats = 3;  // per row: max, sum of exp(x - max), target logit

// The real (non-padding) columns of a rank holding [v0, v0 + Vl) of a vocabulary of V.
WEFT_VOCAB_CE_HD int64_t real_columns(int64_t V, int64_t v0, int64_t Vl) {
  const int64_t r = V - v0;
  return r < 0 ? 0 : (r > Vl ? Vl : r);
}

// (m, s) becomes the pair of the union of the two ranges (m, s) and (m2, s2) describe: the max,
// and the sum of exp(x - max) rescaled to it (the online softmax, Milakov & Gimelshein 2018). An
// empty range (m = -inf, s = 0) adds nothing; the guard keeps a NaN out when both are empty.
WEFT_VOCAB_CE_HD void fold(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  const float a = m == -INFINITY ? 0.f : s * expf(m - mx);
  const float b = m2 == -INFINITY ? 0.f : s2 * expf(m2 - mx);
  m = mx;
  s = a + b;
}

// A row's statistics summed over the tp ranks.
struct Totals {
  float max;     // M
  float sum;     // S = sum over the vocabulary of exp(x - M)
  float target;  // the target's logit
};

// From one row's statistics of every rank (rank r's at row + r * rank_stride): M first, then S
// in rank order, each rank's sum rescaled once (with tp = 1, S = s_0 exactly).
WEFT_VOCAB_CE_HD Totals totals(const float* row, int64_t rank_stride, int tp) {
  Totals t{-INFINITY, 0.f, 0.f};
  for (int r = 0; r < tp; ++r) t.max = fmaxf(t.max, row[r * rank_stride]);
  for (int r = 0; r < tp; ++r) {
    const float* st = row + r * rank_stride;
    // An all-padding rank (m_r = -inf, s_r = 0) adds nothing; 0 * exp(-inf - M) would be 0, but
    // the guard keeps a NaN out if every m_r were -inf.
    if (st[0] != -INFINITY) t.sum += st[1] * expf(st[0] - t.max);
    t.target += st[2];
  }
  return t;
}

// -log softmax(x)[target] = (M - z_y) + log(S); lse = M + log(S) is never rounded on its own.
WEFT_VOCAB_CE_HD float loss(const Totals& t) { return (t.max - t.target) + logf(t.sum); }

// d(dloss * loss)/dx for a real column x: dloss * (exp(x - M) / S - onehot), 1/S computed once
// by the caller.
WEFT_VOCAB_CE_HD float grad(float x, float max, float inv_sum, float dloss, bool is_target) {
  return dloss * (expf(x - max) * inv_sum - (is_target ? 1.f : 0.f));
}

}  // namespace weft::kernels::vocab_ce

#undef WEFT_VOCAB_CE_HD
