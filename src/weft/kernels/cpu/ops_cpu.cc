// Optimized CPU kernels: the ops of ops.inc, OpenMP-parallel and vectorized, GEMMs through oneDNN.
//
// Compiled with -ffast-math (so reductions vectorize; exp is our own inlined fast_exp, log
// glibc's), hence: nothing here may depend on inf or NaN. Causal attention loops run over j <= t
// only and padded vocabulary columns are skipped explicitly.
//
// Gradients follow ops.inc's rule: activation gradients are written (GEMMs with beta = 0, which
// never read C), layernorm_backward's dinp and every parameter gradient add.
//
// Determinism: every kernel gives bit-identical results run to run for a fixed thread count
// (static schedules, no float atomics, fixed reduction orders). Reductions across rows
// (LayerNorm's dweight/dbias, sum_squares) use fixed-size chunks combined in a fixed order, and
// scatters (embedding_backward, dbias) give each thread whole columns, so those results do not
// depend on the thread count either. oneDNN's GEMMs are deterministic for a fixed thread count.

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "weft/core/check.h"
#include "weft/kernels/gemm.h"
#include "weft/kernels/kernels.h"

namespace weft::kernels::cpu {
namespace {

// Elementwise ops on fewer elements than this stay on the calling thread (a parallel region costs
// a few microseconds).
constexpr int64_t kMinParallel = int64_t{1} << 15;

// Rows per block of causal attention: a row block [r0, r1) only needs key columns [0, r1), which
// skips most of the masked upper triangle while keeping the GEMMs large enough to be efficient.
constexpr int kAttBlock = 64;

// Rows per chunk of layernorm_backward's dweight/dbias partial sums (fixed, so the summation order
// does not depend on the thread count).
constexpr int kLnRowsPerChunk = 32;

// Elements per chunk of sum_squares's partial sums.
constexpr int64_t kSumChunk = int64_t{1} << 16;

// exp(x) for float, written out so that `#pragma omp simd` loops inline it (about 1.5x faster than
// glibc's vector expf here, and the same on every machine): x = n ln2 + r with |r| <= ln2/2,
// exp(r) by a degree-7 polynomial (Cephes' expf coefficients), 2^n built in the exponent bits.
// Relative error about 1 ulp. The argument is clamped to [-87, 88], so the result is always a
// finite normal float (never inf or 0: -ffast-math code must not rely on them).
inline float fast_exp(float x) {
  x = x < -87.f ? -87.f : x;
  x = x > 88.f ? 88.f : x;
  const float n = __builtin_rintf(x * 1.44269504088896341f);  // round(x / ln2)
  const float r =
      __builtin_fmaf(n, -1.428606765330187045e-06f, __builtin_fmaf(n, -0.693145751953125f, x));
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p, r * r, r + 1.f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n, n in [-126, 127]
  return p * __builtin_bit_cast(float, bits);
}

// Grows a thread's scratch buffer to at least n floats and returns it.
float* scratch(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// max(z[0, n)), n >= 1
float row_max(const float* z, int n) {
  float mx = z[0];
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < n; ++j) mx = z[j] > mx ? z[j] : mx;
  return mx;
}

thread_local std::vector<float> tl_attention_scratch;  // [T, T] per thread
thread_local std::vector<float> tl_layernorm_partial;  // [chunks, 2, C] on the calling thread

// dst[c] += sum_n src[n, c] over rows in order; each thread owns a range of columns, so the sum
// order per column is fixed (and the same as a plain loop over n).
void add_column_sums(float* dst, const float* src, int64_t N, int64_t cols) {
#pragma omp parallel if (N * cols >= kMinParallel)
  {
    const Slab r = slab(cols, omp_get_thread_num(), omp_get_num_threads());
    for (int64_t n = 0; n < N; ++n) {
      const float* row = src + n * cols;
#pragma omp simd
      for (int64_t c = r.begin; c < r.end; ++c) dst[c] += row[c];
    }
  }
}

}  // namespace

// ---- token + position embedding -----------------------------------------------------------

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
  const int64_t N = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static) if (N * C >= kMinParallel)
  for (int64_t n = 0; n < N; ++n) {
    float* o = out + n * C;                                      // [C]
    const float* e = wte + static_cast<int64_t>(tokens[n]) * C;  // [C]
    if (wpe == nullptr) {
      std::memcpy(o, e, sizeof(float) * static_cast<size_t>(C));
      continue;
    }
    const float* p = wpe + (n % T) * C;  // [C]
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) {
  const int64_t N = static_cast<int64_t>(B) * T;
  // Each thread owns a range of columns of dwte and dwpe and walks all rows in order: no races,
  // and every element sums its contributions in the order of a plain loop over (b, t).
#pragma omp parallel if (N * C >= kMinParallel)
  {
    const Slab r = slab(C, omp_get_thread_num(), omp_get_num_threads());
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout + n * C;                          // [C]
      float* w = dwte + static_cast<int64_t>(tokens[n]) * C;  // [C]
#pragma omp simd
      for (int64_t c = r.begin; c < r.end; ++c) w[c] += d[c];
      if (dwpe == nullptr) continue;
      float* p = dwpe + (n % T) * C;  // [C]
#pragma omp simd
      for (int64_t c = r.begin; c < r.end; ++c) p[c] += d[c];
    }
  }
}

// ---- LayerNorm over the last dim ---------------------------------------------------------

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, Norm norm) {
  WEFT_CHECK(!norm.rms || (mean == nullptr && bias == nullptr), "RMSNorm has no mean or bias");
  const int64_t size = static_cast<int64_t>(N) * C;
#pragma omp parallel for schedule(static) if (size >= kMinParallel)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<int64_t>(n) * C;  // [C]
    float* y = out + static_cast<int64_t>(n) * C;        // [C]
    float m = 0.f;                                       // RMSNorm: the statistics of x - 0
    if (!norm.rms) {
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int c = 0; c < C; ++c) sum += x[c];
      m = sum / static_cast<float>(C);
    }
    float var = 0.f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) {
      const float d = x[c] - m;
      var += d * d;
    }
    const float s = 1.f / std::sqrt(var / static_cast<float>(C) + norm.eps);
    if (bias != nullptr) {
#pragma omp simd
      for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c];
    }
    if (mean != nullptr) mean[n] = m;
    rstd[n] = s;
  }
}

// RMSNorm's is LayerNorm's with the mean 0 and no mean term in dinp: y = x s w, s = rsqrt(mean
// x^2 + eps), so dx = s (dnorm - norm mean(dnorm norm)) with norm = x s, dnorm = w dy.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, Norm norm) {
  const float centre = norm.rms ? 0.f : 1.f;  // weight of the mean term
  const int nchunks = (N + kLnRowsPerChunk - 1) / kLnRowsPerChunk;
  float* partial = scratch(tl_layernorm_partial, static_cast<int64_t>(nchunks) * 2 * C);
  const int64_t size = static_cast<int64_t>(N) * C;
#pragma omp parallel if (size >= kMinParallel)
  {
#pragma omp for schedule(static)
    for (int k = 0; k < nchunks; ++k) {
      float* pw = partial + static_cast<int64_t>(k) * 2 * C;  // [C] dweight partial
      float* pb = pw + C;                                     // [C] dbias partial
      std::memset(pw, 0, sizeof(float) * 2 * static_cast<size_t>(C));
      const int n1 = std::min(N, (k + 1) * kLnRowsPerChunk);
      for (int n = k * kLnRowsPerChunk; n < n1; ++n) {
        const float* dy = dout + static_cast<int64_t>(n) * C;  // [C]
        const float* x = inp + static_cast<int64_t>(n) * C;    // [C]
        float* dx = dinp + static_cast<int64_t>(n) * C;        // [C]
        const float m = norm.rms ? 0.f : mean[n];
        const float s = rstd[n];
        float dnorm_sum = 0.f;
        float dnorm_norm_sum = 0.f;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
        for (int c = 0; c < C; ++c) {
          const float norm = (x[c] - m) * s;
          const float dnorm = weight[c] * dy[c];
          dnorm_sum += dnorm;
          dnorm_norm_sum += dnorm * norm;
        }
        const float dnorm_mean = centre * dnorm_sum / static_cast<float>(C);
        const float dnorm_norm_mean = dnorm_norm_sum / static_cast<float>(C);
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const float norm = (x[c] - m) * s;
          const float dnorm = weight[c] * dy[c];
          pb[c] += dy[c];
          pw[c] += norm * dy[c];
          dx[c] += s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
        }
      }
    }
    // Combine the chunk partials in chunk order (the implicit barrier above makes them complete).
    const Slab r = slab(C, omp_get_thread_num(), omp_get_num_threads());
    for (int k = 0; k < nchunks; ++k) {
      const float* pw = partial + static_cast<int64_t>(k) * 2 * C;
      const float* pb = pw + C;
#pragma omp simd
      for (int64_t c = r.begin; c < r.end; ++c) dweight[c] += pw[c];
      if (dbias == nullptr) continue;
#pragma omp simd
      for (int64_t c = r.begin; c < r.end; ++c) dbias[c] += pb[c];
    }
  }
}

// ---- linear --------------------------------------------------------------------------------

// The linear layers' GEMMs run at the process's matmul precision (kernels.h); attention's
// per-head GEMMs stay fp32.
namespace {
void linear_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (matmul_precision() == MatmulPrecision::BF16) {
    sgemm_bf16(trans_a, trans_b, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
  } else {
    sgemm(trans_a, trans_b, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
  }
}
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC) {
  if (bias != nullptr) {
    // Start from the bias and let the GEMM accumulate onto it (beta = 1).
    const int64_t size = static_cast<int64_t>(N) * OC;
#pragma omp parallel for schedule(static) if (size >= kMinParallel)
    for (int n = 0; n < N; ++n) {
      std::memcpy(out + static_cast<int64_t>(n) * OC, bias, sizeof(float) * OC);
    }
  }
  linear_gemm(false, true, N, OC, IC, inp, IC, weight, IC, bias != nullptr ? 1.f : 0.f, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  // dinp[N,IC] = dout[N,OC] @ weight[OC,IC] (written: beta = 0)
  if (dinp != nullptr) linear_gemm(false, false, N, IC, OC, dout, OC, weight, IC, 0.f, dinp, IC);
  // dweight[OC,IC] += dout^T @ inp[N,IC]
  if (dweight != nullptr) linear_gemm(true, false, OC, IC, N, dout, OC, inp, IC, 1.f, dweight, IC);
  if (dbias != nullptr) add_column_sums(dbias, dout, N, OC);
}

// ---- causal self-attention core -------------------------------------------------------------
// Per (b, h), with q, k, v read in place from qkv (row stride W = C + 2*NKV*HS) and the GEMMs run
// single-threaded inside the parallel loop. Query head h reads key/value head h / (NH/NKV).

namespace {
struct AttentionDims {
  int HS, group;    // head size; query heads per key/value head
  int64_t W, kv_C;  // qkv's row width; NKV*HS
  float scale;
};
AttentionDims attention_dims(int C, int NH, int NKV) {
  WEFT_CHECK(NH > 0 && C % NH == 0, "C=", C, " is not divisible by NH=", NH);
  WEFT_CHECK(NKV > 0 && NH % NKV == 0, "NH=", NH, " is not a multiple of NKV=", NKV);
  const int HS = C / NH;
  return {HS, NH / NKV, C + 2 * static_cast<int64_t>(NKV) * HS, static_cast<int64_t>(NKV) * HS,
          1.f / std::sqrt(static_cast<float>(HS))};
}
}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       int NKV) {
  const AttentionDims d = attention_dims(C, NH, NKV);
  const int HS = d.HS;
  const int64_t W = d.W;
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH;
    const int h = bh % NH;
    const float* row0 = qkv + static_cast<int64_t>(b) * T * W;
    const float* q = row0 + h * HS;                             // [T, HS], stride W
    const float* k = row0 + C + (h / d.group) * HS;             // [T, HS], stride W
    const float* v = k + d.kv_C;                                // [T, HS], stride W
    float* a = att + static_cast<int64_t>(bh) * T * T;          // [T, T]
    float* o = out + static_cast<int64_t>(b) * T * C + h * HS;  // [T, HS], stride C
    for (int r0 = 0; r0 < T; r0 += kAttBlock) {
      const int r1 = std::min(T, r0 + kAttBlock);
      // a[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T
      sgemm(false, true, r1 - r0, r1, HS, d.scale, q + r0 * W, W, k, W, 0.f, a + int64_t{r0} * T,
            T);
      for (int t = r0; t < r1; ++t) {
        float* row = a + static_cast<int64_t>(t) * T;  // [T]
        const float mx = row_max(row, t + 1);
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j <= t; ++j) {
          const float e = fast_exp(row[j] - mx);
          row[j] = e;
          sum += e;
        }
        const float inv = 1.f / sum;
#pragma omp simd
        for (int j = 0; j <= t; ++j) row[j] *= inv;
        std::fill(row + t + 1, row + T, 0.f);
      }
      // o[r0:r1] = a[r0:r1, 0:r1] @ v[0:r1]
      sgemm(false, false, r1 - r0, HS, r1, 1.f, a + int64_t{r0} * T, T, v, W, 0.f, o + r0 * C, C);
    }
  }
}

// Relies on att holding exact zeros for j > t, as attention_forward writes it. dqkv is written:
// each block of dq rows comes from one GEMM over every term it sums (beta = 0); a key/value head's
// dk and dv sum over its group's query heads, in head order, on the one thread that owns the
// (b, key/value head) pair (the first head writes, the others add: deterministic, no races).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH, int NKV) {
  const AttentionDims d = attention_dims(C, NH, NKV);
  const int HS = d.HS;
  const int64_t W = d.W;
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < B * NKV; ++bg) {
    const int b = bg / NKV;
    const int g = bg % NKV;
    const int64_t row0 = static_cast<int64_t>(b) * T * W;
    const float* k = qkv + row0 + C + g * HS;  // [T, HS], stride W
    const float* v = k + d.kv_C;
    float* dk = dqkv + row0 + C + g * HS;
    float* dv = dk + d.kv_C;
    float* ds = scratch(tl_attention_scratch, static_cast<int64_t>(T) * T);  // [T, T]
    for (int h = g * d.group; h < (g + 1) * d.group; ++h) {
      const float beta = h == g * d.group ? 0.f : 1.f;
      const float* q = qkv + row0 + h * HS;  // [T, HS], stride W
      float* dq = dqkv + row0 + h * HS;
      const float* a = att + (static_cast<int64_t>(b) * NH + h) * T * T;  // [T, T]
      const float* dy = dout + static_cast<int64_t>(b) * T * C + h * HS;  // [T, HS], stride C
      for (int r0 = 0; r0 < T; r0 += kAttBlock) {
        const int r1 = std::min(T, r0 + kAttBlock);
        // da[r0:r1, 0:r1] = dy[r0:r1] @ v[0:r1]^T
        sgemm(false, true, r1 - r0, r1, HS, 1.f, dy + r0 * C, C, v, W, 0.f, ds + int64_t{r0} * T,
              T);
        // ds = a * (da - sum_j a da), zero for j > t (up to r1, all the GEMMs below read).
        for (int t = r0; t < r1; ++t) {
          const float* arow = a + static_cast<int64_t>(t) * T;
          float* drow = ds + static_cast<int64_t>(t) * T;
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j <= t; ++j) dot += arow[j] * drow[j];
#pragma omp simd
          for (int j = 0; j <= t; ++j) drow[j] = arow[j] * (drow[j] - dot);
          std::fill(drow + t + 1, drow + r1, 0.f);
        }
        // dq[r0:r1] = scale * ds[r0:r1, 0:r1] @ k[0:r1]
        sgemm(false, false, r1 - r0, HS, r1, d.scale, ds + int64_t{r0} * T, T, k, W, 0.f,
              dq + r0 * W, W);
      }
      // Key/value rows [c0, c1) receive from query rows t >= c0 only.
      for (int c0 = 0; c0 < T; c0 += kAttBlock) {
        const int c1 = std::min(T, c0 + kAttBlock);
        const int64_t corner = static_cast<int64_t>(c0) * T + c0;
        // dv[c0:c1] (+)= a[c0:T, c0:c1]^T @ dy[c0:T]
        sgemm(true, false, c1 - c0, HS, T - c0, 1.f, a + corner, T, dy + c0 * C, C, beta,
              dv + c0 * W, W);
        // dk[c0:c1] (+)= scale * ds[c0:T, c0:c1]^T @ q[c0:T]
        sgemm(true, false, c1 - c0, HS, T - c0, d.scale, ds + corner, T, q + c0 * W, W, beta,
              dk + c0 * W, W);
      }
    }
  }
}

// ---- rotary position embedding ----------------------------------------------------------------

void rope(float* qkv, int B, int T, int NH, int NKV, int HS, float theta, bool inverse) {
  WEFT_CHECK(HS % 2 == 0, "rotary embeddings need an even head size, got ", HS);
  const int half = HS / 2, heads = NH + NKV;  // q's and k's heads are contiguous in a row
  const int64_t W = static_cast<int64_t>(NH + 2 * NKV) * HS, N = static_cast<int64_t>(B) * T;
  // cos and sin of a = t * theta^(-2i/HS), the angle in double and rounded once: [T, half] each.
  std::vector<float> cs(static_cast<size_t>(T) * half * 2);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double a = t * std::pow(static_cast<double>(theta), -2.0 * i / HS);
      cs[(static_cast<size_t>(t) * half + i) * 2] = static_cast<float>(std::cos(a));
      cs[(static_cast<size_t>(t) * half + i) * 2 + 1] =
          static_cast<float>(inverse ? -std::sin(a) : std::sin(a));
    }
  }
#pragma omp parallel for schedule(static) if (N * heads * HS >= kMinParallel)
  for (int64_t n = 0; n < N; ++n) {
    const float* r = cs.data() + static_cast<size_t>(n % T) * half * 2;  // [half, 2]
    for (int h = 0; h < heads; ++h) {
      float* x = qkv + n * W + static_cast<int64_t>(h) * HS;  // [HS]
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float c = r[2 * i], sn = r[2 * i + 1], x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * sn;
        x[i + half] = x2 * c + x1 * sn;
      }
    }
  }
}

// ---- SwiGLU -------------------------------------------------------------------------------------

void swiglu_forward(float* out, const float* inp, int N, int F) {
#pragma omp parallel for schedule(static) if (int64_t{N} * F >= kMinParallel)
  for (int n = 0; n < N; ++n) {
    const float* g = inp + static_cast<int64_t>(n) * 2 * F;  // [F] gate, then [F] up
    float* o = out + static_cast<int64_t>(n) * F;
#pragma omp simd
    for (int j = 0; j < F; ++j) o[j] = g[j] / (1.f + fast_exp(-g[j])) * g[F + j];
  }
}

// d gate = dout * up * sig(g) (1 + g (1 - sig(g))), d up = dout * silu(g).
void swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int F) {
#pragma omp parallel for schedule(static) if (int64_t{N} * F >= kMinParallel)
  for (int n = 0; n < N; ++n) {
    const float* g = inp + static_cast<int64_t>(n) * 2 * F;
    const float* dy = dout + static_cast<int64_t>(n) * F;
    float* dg = dinp + static_cast<int64_t>(n) * 2 * F;
#pragma omp simd
    for (int j = 0; j < F; ++j) {
      const float sig = 1.f / (1.f + fast_exp(-g[j]));
      dg[j] = dy[j] * g[F + j] * sig * (1.f + g[j] * (1.f - sig));
      dg[F + j] = dy[j] * g[j] * sig;
    }
  }
}

// ---- GeLU (tanh approximation, as GPT-2) ---------------------------------------------------

namespace {
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;
// exp(-2u) is capped at exp(80) so that s = 1 / (1 + e) and e s^2 stay normal floats (x < -9.4,
// where GeLU is below 1e-35 anyway).
constexpr float kGeluMaxExp = 80.f;
}  // namespace

// 0.5 (1 + tanh(u)) = sigmoid(2u), so with e = exp(-2u) and s = 1 / (1 + e):
//   out = x s,   d out / dx = s + 2 x s (1 - s) du/dx,   1 - s = e s (no cancellation).
void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluK * (x + kGeluA * x * x * x);
    out[i] = x / (1.f + fast_exp(std::min(-2.f * u, kGeluMaxExp)));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluK * (x + kGeluA * x * x * x);
    const float e = fast_exp(std::min(-2.f * u, kGeluMaxExp));
    const float s = 1.f / (1.f + e);
    const float du_dx = kGeluK * (1.f + 3.f * kGeluA * x * x);
    const float grad = s + 2.f * x * s * (e * s) * du_dx;
    dinp[i] = grad * dout[i];
  }
}

// ---- residual add --------------------------------------------------------------------------

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// ---- fused softmax + cross-entropy over a padded vocabulary ---------------------------------

void softmax_cross_entropy_fused(float* losses, float* logits, const int32_t* targets, float dloss,
                                 int N, int V, int Vp) {
  WEFT_CHECK(V > 0 && V <= Vp, "need 0 < V <= Vp, got V=", V, " Vp=", Vp);
  for (int n = 0; n < N; ++n) {
    WEFT_CHECK(targets[n] < V, "target ", targets[n], " at row ", n, " is not below V=", V);
  }
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* z = logits + static_cast<int64_t>(n) * Vp;  // [Vp]; becomes the gradient
    const int32_t y = targets[n];
    if (y < 0) {
      losses[n] = 0.f;
      std::fill(z, z + Vp, 0.f);
      continue;
    }
    // Three passes over one row (which stays in L2): max; exp (stored) and sum; scale.
    const float mx = row_max(z, V);
    const float zy = z[y];
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; ++j) {
      const float e = fast_exp(z[j] - mx);
      z[j] = e;
      sum += e;
    }
    losses[n] = std::log(sum) + mx - zy;
    const float f = dloss / sum;
#pragma omp simd
    for (int j = 0; j < V; ++j) z[j] *= f;
    z[y] -= dloss;
    std::fill(z + V, z + Vp, 0.f);
  }
}

// ---- optimizer -----------------------------------------------------------------------------

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t,
                  float grad_scale) {
  const float inv_c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), t)));
  const float inv_c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), t)));
  const float one_minus_b1 = 1.f - beta1;
  const float one_minus_b2 = 1.f - beta2;
#pragma omp parallel for simd schedule(static) if (n >= kMinParallel)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
    const float mi = beta1 * m[i] + one_minus_b1 * g;
    const float vi = beta2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float p = params[i];
    params[i] = p - lr * ((mi * inv_c1) / (std::sqrt(vi * inv_c2) + eps) + weight_decay * p);
  }
}

double sum_squares(const float* x, int64_t n) {
  const int64_t nchunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(static_cast<size_t>(nchunks));
#pragma omp parallel for schedule(static) if (n >= kMinParallel)
  for (int64_t k = 0; k < nchunks; ++k) {
    const int64_t i1 = std::min(n, (k + 1) * kSumChunk);
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = k * kSumChunk; i < i1; ++i) {
      const double xi = static_cast<double>(x[i]);
      acc += xi * xi;
    }
    partial[static_cast<size_t>(k)] = acc;
  }
  double total = 0.0;
  for (const double p : partial) total += p;
  return total;
}

}  // namespace weft::kernels::cpu
