// The host BF16Mixed implementation of Backend (backend.h): the mixed-precision ops on host memory,
// each computed in fp32 (double for sums of squares) from the bf16 inputs, and each bf16 output
// rounded once, where the CUDA kernels of kernels_cuda.h round it (docs/cuda.md). It is the
// reference the GPU backend is checked against, so where the GPU has two paths (cuBLASLt's fused
// epilogues or a separate kernel) this follows the fused one: pre_gelu = round(acc + bias) and
// out = round(gelu(acc + bias)) from the fp32 accumulator, dinp = round(acc * gelu'(pre)).
//
// GEMMs run through sgemm (oneDNN, fp32) on fp32 copies of the bf16 operands: a product of two
// bf16 values is exact in fp32, so only the accumulation order differs from the GPU's tensor
// cores. Attention is a plain causal loop per (batch, head), OpenMP-parallel over the pairs,
// with the FlashAttention-2 backward's formulation (probabilities recomputed from lse, D from the
// stored bf16 out); grouped-query, its backward runs per (batch, key/value head) and adds the
// group's query heads in order, as the CUDA kernel. Compiled without -ffast-math: the
// cross-entropy's NaN rows must stay NaN. Where an expression could be contracted into a fused
// multiply-add (RoPE, SwiGLU's backward), both this file and the CUDA kernel write the fma out, so
// the compilers' contraction choices cannot set them apart.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "weft/core/check.h"
#include "weft/core/dtype.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/cpu/host_backend.h"
#include "weft/kernels/gemm.h"
#include "weft/kernels/kernels.h"
#include "weft/kernels/vocab_parallel_ce.h"

namespace weft::kernels {
namespace {

inline BF16 round_bf16(float x) { return BF16::from_float(x); }

// GeLU, tanh approximation (Hendrycks & Gimpel 2016), in float as the CUDA kernels' gelu and
// gelu_grad (common.cuh) and ref::gelu_forward / gelu_backward.
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
inline float gelu(float x) {
  const float u = kGeluK * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.f + std::tanh(u));
}
inline float gelu_grad(float x) {
  const float u = kGeluK * (x + 0.044715f * x * x * x);
  const float th = std::tanh(u);
  const float du_dx = kGeluK * (1.f + 3.f * 0.044715f * x * x);
  return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * du_dx;
}

// Grows a scratch buffer to at least n floats and returns it.
float* scratch(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// scratch(buf, n) holding float(in[i]) for i < n.
const float* widen(std::vector<float>& buf, const BF16* in, int64_t n) {
  float* out = scratch(buf, n);
#pragma omp parallel for schedule(static) if (n >= kHostMinParallel)
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
  return out;
}

// dst[c] += sum_n src[n, c] (src [N, cols] bf16), each column summed in row order in fp32 and
// added once, as the CUDA column sums add their total.
void add_column_sums(float* dst, const BF16* src, int64_t N, int64_t cols) {
#pragma omp parallel for schedule(static) if (N * cols >= kHostMinParallel)
  for (int64_t c = 0; c < cols; ++c) {
    float acc = 0.f;
    for (int64_t n = 0; n < N; ++n) acc += to_float(src[n * cols + c]);
    dst[c] += acc;
  }
}

void check_layernorm(int N, int C, const float* mean, const void* bias, Norm norm) {
  WEFT_CHECK(N >= 0 && C > 0, "LayerNorm with N=", N, " C=", C);
  WEFT_CHECK(!norm.rms || (mean == nullptr && bias == nullptr), "RMSNorm has no mean or bias");
}

void check_linear_dims(int N, int IC, int OC) {
  WEFT_CHECK(N >= 0 && IC > 0 && OC > 0, "linear layer with N=", N, " IC=", IC, " OC=", OC);
}

void check_attention_dims(int B, int T, int C, int NH, int NKV) {
  WEFT_CHECK(B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0,
             "attention with B=", B, " T=", T, " C=", C, " NH=", NH, " NKV=", NKV,
             " (C must be divisible by NH, NH by NKV)");
}

// LayerNorm of the N rows of out[N,C], row n computed from x[C], the fp32 values of bf16 inputs
// that read_row(n * C, x) writes: two passes for mean and variance, as the CUDA kernel (one warp
// per row) and ref::layernorm_forward. RMSNorm: the mean pass is skipped and taken as 0, so the
// second pass sums squares; mean (null) is not written. A null bias adds nothing (not +0, which
// would turn a -0 into +0), in a loop of its own so that the compiler's contraction of the biased
// expression into an fma is what it always was.
template <typename ReadRow>
void layernorm_rows(BF16* out, float* mean, float* rstd, const BF16* weight, const BF16* bias,
                    int N, int C, Norm norm, ReadRow read_row) {
#pragma omp parallel if (static_cast <int64_t>(N) * C >= kHostMinParallel)
  {
    std::vector<float> row(static_cast<size_t>(C));  // [C]
    const float* x = row.data();
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      read_row(static_cast<int64_t>(n) * C, row.data());
      BF16* y = out + static_cast<int64_t>(n) * C;  // [C]
      float m = 0.f;
      if (!norm.rms) {
        float sum = 0.f;
        for (int c = 0; c < C; ++c) sum += x[c];
        m = sum / static_cast<float>(C);
      }
      float var = 0.f;
      for (int c = 0; c < C; ++c) {
        const float d = x[c] - m;
        var += d * d;
      }
      const float s = 1.f / std::sqrt(var / static_cast<float>(C) + norm.eps);
      if (bias != nullptr) {  // today's expression, as written before RMSNorm: the same bits
        for (int c = 0; c < C; ++c) {
          y[c] = round_bf16((x[c] - m) * s * to_float(weight[c]) + to_float(bias[c]));
        }
      } else {
        for (int c = 0; c < C; ++c) y[c] = round_bf16((x[c] - m) * s * to_float(weight[c]));
      }
      if (mean != nullptr) mean[n] = m;
      rstd[n] = s;
    }
  }
}

class HostBf16Backend final : public HostBackend<HostBf16Backend, BF16> {
 public:
  void convert(BF16* out, const float* in, int64_t n) {
    WEFT_CHECK(n >= 0, "negative element count ", n);
#pragma omp parallel for schedule(static) if (n >= kHostMinParallel)
    for (int64_t i = 0; i < n; ++i) out[i] = round_bf16(in[i]);
  }

  void embedding_forward(BF16* out, const int32_t* tokens, const BF16* wte, const BF16* wpe, int B,
                         int T, int C) {
    WEFT_CHECK(B >= 0 && T >= 0 && C > 0, "embedding with B=", B, " T=", T, " C=", C);
    const int64_t N = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static) if (N * C >= kHostMinParallel)
    for (int64_t n = 0; n < N; ++n) {
      BF16* o = out + n * C;                                      // [C]
      const BF16* e = wte + static_cast<int64_t>(tokens[n]) * C;  // [C]
      if (wpe == nullptr) {  // no position table (rotary models): the row itself, exact
        std::copy(e, e + C, o);
        continue;
      }
      const BF16* p = wpe + (n % T) * C;  // [C]
      for (int c = 0; c < C; ++c) o[c] = round_bf16(to_float(e[c]) + to_float(p[c]));
    }
  }

  // As the CUDA kernels: each token's rows are summed in position order in fp32 and the total is
  // added to dwte[token] once; dwpe[t] += the sum over b, in order (dwpe may be null).
  void embedding_backward(float* dwte, float* dwpe, const BF16* dout, const int32_t* tokens_host,
                          int B, int T, int C) {
    WEFT_CHECK(B >= 0 && T >= 0 && C > 0, "embedding with B=", B, " T=", T, " C=", C);
    const int64_t N = static_cast<int64_t>(B) * T;
    for (int64_t i = 0; i < N; ++i) {  // as the CUDA plan (host_plans.h: group_tokens) rejects
      WEFT_CHECK(tokens_host[i] >= 0, "token ", tokens_host[i], " at position ", i, " is negative");
    }
    // Each token is below the vocabulary's size, so below 2^31 - 1: the shard of all tokens.
    embedding_backward_shard(dwte, dwpe, dout, tokens_host, B, T, C, 0,
                             std::numeric_limits<int32_t>::max());
  }

  // The same sums as embedding_backward, restricted to this rank's rows: a token's total is
  // bit-identical to the one embedding_backward adds, so the ranks' dwte concatenated are
  // embedding_backward's dwte.
  void embedding_backward_shard(float* dwte, float* dwpe, const BF16* dout,
                                const int32_t* tokens_host, int B, int T, int C, int v0, int Vl) {
    check_embedding_shard(B, T, C, v0, Vl);
    const int64_t N = static_cast<int64_t>(B) * T;
    if (N == 0) return;
    add_token_rows(dwte, dout, tokens_host, N, C, v0, Vl);
    // dwpe[T, C] += the sum over b of dout[B, T, C]
    if (dwpe != nullptr) add_column_sums(dwpe, dout, B, static_cast<int64_t>(T) * C);
  }

  void layernorm_forward(BF16* out, float* mean, float* rstd, const BF16* inp, const BF16* weight,
                         const BF16* bias, int N, int C, Norm norm) {
    check_layernorm(N, C, mean, bias, norm);
    layernorm_rows(out, mean, rstd, weight, bias, N, C, norm, [&](int64_t row, float* x) {
      for (int c = 0; c < C; ++c) x[c] = to_float(inp[row + c]);
    });
  }

  void residual_forward(BF16* out, const BF16* a, const BF16* b, int64_t n) {
    WEFT_CHECK(n >= 0, "negative element count ", n);
#pragma omp parallel for schedule(static) if (n >= kHostMinParallel)
    for (int64_t i = 0; i < n; ++i) out[i] = round_bf16(to_float(a[i]) + to_float(b[i]));
  }
  void fused_residual_layernorm_forward(BF16* residual, BF16* out, float* mean, float* rstd,
                                        const BF16* a, const BF16* b, const BF16* weight,
                                        const BF16* bias, int N, int C, Norm norm) {
    check_layernorm(N, C, mean, bias, norm);
    WEFT_CHECK(residual != nullptr, "fused_residual_layernorm_forward needs a residual output");
    layernorm_rows(out, mean, rstd, weight, bias, N, C, norm, [&](int64_t row, float* x) {
      for (int c = 0; c < C; ++c) {
        const BF16 r = round_bf16(to_float(a[row + c]) + to_float(b[row + c]));
        residual[row + c] = r;
        x[c] = to_float(r);  // normalize the rounded value, as layernorm_forward(residual)
      }
    });
  }

  // dinp += rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm)), dnorm = dout * weight,
  // rounded once into the bf16 dinp; dweight += sum_n dout * norm, dbias += sum_n dout (fp32;
  // dbias may be null). RMSNorm: the mean is 0 and mean_c(dnorm) is not subtracted (the CUDA
  // kernels skip that sum too; x - 0 and a - 0 are exact, so the rest is LayerNorm's arithmetic).
  void layernorm_backward(BF16* dinp, float* dweight, float* dbias, const BF16* dout,
                          const BF16* inp, const BF16* weight, const float* mean, const float* rstd,
                          int N, int C, Norm norm) {
    check_layernorm(N, C, mean, dbias, norm);
    if (N == 0) return;
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * C >= kHostMinParallel)
    for (int n = 0; n < N; ++n) {
      const int64_t row = static_cast<int64_t>(n) * C;
      const BF16* dy = dout + row;  // [C]
      const BF16* x = inp + row;    // [C]
      BF16* dx = dinp + row;        // [C]
      const float m = norm.rms ? 0.f : mean[n];
      const float s = rstd[n];
      float dnorm_sum = 0.f;
      float dnorm_norm_sum = 0.f;
      for (int c = 0; c < C; ++c) {
        const float normed = (to_float(x[c]) - m) * s;
        const float dnorm = to_float(weight[c]) * to_float(dy[c]);
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * normed;
      }
      const float dnorm_mean = norm.rms ? 0.f : dnorm_sum / static_cast<float>(C);
      const float dnorm_norm_mean = dnorm_norm_sum / static_cast<float>(C);
      for (int c = 0; c < C; ++c) {
        const float normed = (to_float(x[c]) - m) * s;
        const float dnorm = to_float(weight[c]) * to_float(dy[c]);
        dx[c] = round_bf16(to_float(dx[c]) + s * (dnorm - dnorm_mean - normed * dnorm_norm_mean));
      }
    }
    // Column sums, each column over the rows in order, added once.
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * C >= kHostMinParallel)
    for (int c = 0; c < C; ++c) {
      float sum = 0.f;
      float normed = 0.f;
      for (int n = 0; n < N; ++n) {
        const int64_t i = static_cast<int64_t>(n) * C + c;
        const float d = to_float(dout[i]);
        sum += d;
        normed += d * (to_float(inp[i]) - (norm.rms ? 0.f : mean[n])) * rstd[n];
      }
      if (dbias != nullptr) dbias[c] += sum;
      dweight[c] += normed;
    }
  }

  void linear_forward(BF16* out, BF16* pre_gelu, const BF16* inp, const BF16* weight,
                      const BF16* bias, int N, int IC, int OC) {
    check_linear_dims(N, IC, OC);
    if (N == 0) return;
    const int64_t in_size = static_cast<int64_t>(N) * IC;
    const int64_t w_size = static_cast<int64_t>(OC) * IC;
    const int64_t out_size = static_cast<int64_t>(N) * OC;
    const float* x = widen(scratch_a_, inp, in_size);    // [N, IC]
    const float* w = widen(scratch_b_, weight, w_size);  // [OC, IC]
    float* acc = scratch(scratch_c_, out_size);          // [N, OC]
    sgemm(false, true, N, OC, IC, 1.f, x, IC, w, IC, 0.f, acc, OC);
    // The epilogue, on the fp32 accumulator: + bias, then (with pre_gelu) GeLU.
#pragma omp parallel for schedule(static) if (out_size >= kHostMinParallel)
    for (int n = 0; n < N; ++n) {
      const int64_t row = static_cast<int64_t>(n) * OC;
      for (int o = 0; o < OC; ++o) {
        float v = acc[row + o];
        if (bias != nullptr) v += to_float(bias[o]);
        if (pre_gelu != nullptr) {
          pre_gelu[row + o] = round_bf16(v);
          v = gelu(v);
        }
        out[row + o] = round_bf16(v);
      }
    }
  }

  void linear_backward(BF16* dinp, float* dweight, float* dbias, const BF16* dout, const BF16* inp,
                       const BF16* weight, const BF16* gelu_pre, int N, int IC, int OC) {
    check_linear_dims(N, IC, OC);
    if (N == 0) return;
    const int64_t in_size = static_cast<int64_t>(N) * IC;
    const int64_t out_size = static_cast<int64_t>(N) * OC;
    if (dinp == nullptr && dweight == nullptr) {
      if (dbias != nullptr) add_column_sums(dbias, dout, N, OC);
      return;
    }
    const float* dy = widen(scratch_a_, dout, out_size);  // [N, OC]
    if (dinp != nullptr) {
      const int64_t w_size = static_cast<int64_t>(OC) * IC;
      const float* w = widen(scratch_b_, weight, w_size);  // [OC, IC]
      float* acc = scratch(scratch_c_, in_size);           // [N, IC]
      sgemm(false, false, N, IC, OC, 1.f, dy, OC, w, IC, 0.f, acc, IC);
      // With GeLU, as the GPU: the product rounded to bf16 (the GEMM's output type), then times
      // gelu'(pre), rounded again. The CUDA fallback writes the product and a GeLU-backward kernel
      // reads it back; cuBLASLt's DGELU epilogue rounds where that does (on the H200, 2026-12-04,
      // rounding the product once against it put 26% of the elements 1 ulp apart, unbiased).
#pragma omp parallel for schedule(static) if (in_size >= kHostMinParallel)
      for (int64_t i = 0; i < in_size; ++i) {
        dinp[i] = gelu_pre != nullptr
                      ? round_bf16(to_float(round_bf16(acc[i])) * gelu_grad(to_float(gelu_pre[i])))
                      : round_bf16(acc[i]);
      }
    }
    if (dweight != nullptr) {
      const float* x = widen(scratch_b_, inp, in_size);  // [N, IC]
      // dweight[OC, IC] += dout^T @ inp, straight into the fp32 gradient (beta = 1).
      sgemm(true, false, OC, IC, N, 1.f, dy, OC, x, IC, 1.f, dweight, IC);
    }
    if (dbias != nullptr) add_column_sums(dbias, dout, N, OC);
  }

  // out[N,F] = round(silu(g) * u), silu(g) = g / (1 + exp(-g)) in fp32, as the CUDA kernel.
  void swiglu_forward(BF16* out, const BF16* inp, int N, int F) {
    check_swiglu_dims(N, F);
    const int64_t n = static_cast<int64_t>(N) * F;
#pragma omp parallel for schedule(static) if (n >= kHostMinParallel)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = (i / F) * 2 * F + i % F;  // the gate's column in inp[N, 2F]
      const float g = to_float(inp[at]), u = to_float(inp[at + F]);
      out[i] = round_bf16(g / (1.f + std::exp(-g)) * u);
    }
  }
  // dg = round(dout * u * sig * (1 + g (1 - sig))), du = round(dout * g * sig), sig = sigmoid(g):
  // the products left to right and 1 + g (1 - sig) as one fma, as the CUDA kernel.
  void swiglu_backward(BF16* dinp, const BF16* dout, const BF16* inp, int N, int F) {
    check_swiglu_dims(N, F);
    const int64_t n = static_cast<int64_t>(N) * F;
#pragma omp parallel for schedule(static) if (n >= kHostMinParallel)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = (i / F) * 2 * F + i % F;
      const float g = to_float(inp[at]), u = to_float(inp[at + F]), dy = to_float(dout[i]);
      const float sig = 1.f / (1.f + std::exp(-g));
      dinp[at] = round_bf16(dy * u * sig * std::fma(g, 1.f - sig, 1.f));
      dinp[at + F] = round_bf16(dy * g * sig);
    }
  }

  // Pairs (i, i + HS/2) of the q and k heads rotated by a = t * rope_inv_freq(theta, i, HS) (-a
  // when inverse): cos a and sin a from double, rounded to float; x1' = fma(x1, c, -(x2 s)),
  // x2' = fma(x2, c, x1 s), rounded once, as the CUDA kernel.
  void rope(BF16* qkv, int B, int T, int NH, int NKV, int HS, float theta, bool inverse) {
    WEFT_CHECK(B >= 0 && T >= 0 && NH > 0 && NKV > 0 && HS > 0 && HS % 2 == 0,
               "rotary embedding with B=", B, " T=", T, " NH=", NH, " NKV=", NKV, " HS=", HS,
               " (HS must be even)");
    const int half = HS / 2, heads = NH + NKV;  // q's and k's heads are contiguous in a row
    const int64_t W = static_cast<int64_t>(NH + 2 * NKV) * HS, N = static_cast<int64_t>(B) * T;
    std::vector<float> cs(static_cast<size_t>(T) * half * 2);  // [T, half, {cos, sin}]
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < half; ++i) {
        const double a = t * rope_inv_freq(theta, i, HS);
        const float sn = static_cast<float>(std::sin(a));
        cs[(static_cast<size_t>(t) * half + i) * 2] = static_cast<float>(std::cos(a));
        cs[(static_cast<size_t>(t) * half + i) * 2 + 1] = inverse ? -sn : sn;
      }
    }
#pragma omp parallel for schedule(static) if (N * heads * HS >= kHostMinParallel)
    for (int64_t n = 0; n < N; ++n) {
      const float* r = cs.data() + static_cast<size_t>(n % T) * half * 2;  // [half, 2]
      for (int h = 0; h < heads; ++h) {
        BF16* x = qkv + n * W + static_cast<int64_t>(h) * HS;  // [HS]
        for (int i = 0; i < half; ++i) {
          const float c = r[2 * i], sn = r[2 * i + 1];
          const float x1 = to_float(x[i]), x2 = to_float(x[i + half]);
          x[i] = round_bf16(std::fma(x1, c, -(x2 * sn)));
          x[i + half] = round_bf16(std::fma(x2, c, x1 * sn));
        }
      }
    }
  }

  // Per (b, h): scores s_tj = q_t . k_j / sqrt(HS) for j <= t in fp32 (k, v: the key/value head
  // h / (NH/NKV)), lse_t = logsumexp_j s_tj, out_t = sum_j exp(s_tj - max) v_j /
  // sum_j exp(s_tj - max) (normalized at the end, as the flash forward does), rounded once.
  void attention_forward(BF16* out, float* lse, const BF16* qkv, int B, int T, int C, int NH,
                         int NKV) {
    check_attention_dims(B, T, C, NH, NKV);
    const int HS = C / NH;
    const int group = NH / NKV;
    const float scale = 1.f / std::sqrt(static_cast<float>(HS));
    const int64_t head_size = static_cast<int64_t>(T) * HS;
#pragma omp parallel
    {
      std::vector<float> head(static_cast<size_t>(3 * head_size));  // q, k, v: [3, T, HS]
      std::vector<float> s(static_cast<size_t>(T));                 // [T] one row of scores
      std::vector<float> o(static_cast<size_t>(HS));                // [HS] one output row
#pragma omp for schedule(dynamic)
      for (int bh = 0; bh < B * NH; ++bh) {
        const int b = bh / NH;
        const int h = bh % NH;
        float* q = head.data();
        float* k = q + head_size;
        float* v = k + head_size;
        load_head(q, qkv, b, T, C, NH, NKV, h);
        load_head(k, qkv, b, T, C, NH, NKV, NH + h / group);
        load_head(v, qkv, b, T, C, NH, NKV, NH + NKV + h / group);
        for (int t = 0; t < T; ++t) {
          const float* qt = q + static_cast<int64_t>(t) * HS;
          float maxval = -std::numeric_limits<float>::infinity();
          for (int j = 0; j <= t; ++j) {
            const float* kj = k + static_cast<int64_t>(j) * HS;
            float dot = 0.f;
            for (int d = 0; d < HS; ++d) dot += qt[d] * kj[d];
            s[j] = dot * scale;
            maxval = std::max(maxval, s[j]);
          }
          float sum = 0.f;
          std::fill(o.begin(), o.end(), 0.f);
          for (int j = 0; j <= t; ++j) {
            const float p = std::exp(s[j] - maxval);
            sum += p;
            const float* vj = v + static_cast<int64_t>(j) * HS;
            for (int d = 0; d < HS; ++d) o[d] += p * vj[d];
          }
          BF16* out_t = out + (static_cast<int64_t>(b) * T + t) * C + h * HS;  // [HS]
          for (int d = 0; d < HS; ++d) out_t[d] = round_bf16(o[d] / sum);
          lse[(static_cast<int64_t>(b) * NH + h) * T + t] = maxval + std::log(sum);
        }
      }
    }
  }

  // FlashAttention-2's backward (Dao 2023, Algorithm 2) without tiles: P = exp(S - lse),
  // D_t = dout_t . out_t (the stored bf16 out), dS = P (dP - D) with dP = dout V^T;
  // dQ = dS K / sqrt(HS), dK = dS^T Q / sqrt(HS), dV = P^T dout, accumulated in fp32 and written
  // rounded. Per (b, key/value head g): dK and dV sum over the group's query heads, in head order,
  // in one fp32 accumulator each (the CUDA kernel's order of terms: head, then query), rounded
  // once; each query head's dQ is written as it is done.
  void attention_backward(BF16* dqkv, const BF16* dout, const BF16* qkv, const BF16* out,
                          const float* lse, int B, int T, int C, int NH, int NKV) {
    check_attention_dims(B, T, C, NH, NKV);
    const int HS = C / NH;
    const int group = NH / NKV;
    const float scale = 1.f / std::sqrt(static_cast<float>(HS));
    const int64_t head_size = static_cast<int64_t>(T) * HS;
#pragma omp parallel
    {
      // q, k, v, dout of the head, then dq, dk, dv: [7, T, HS]
      std::vector<float> buf(static_cast<size_t>(7 * head_size));
      std::vector<float> D(static_cast<size_t>(T));  // [T]
#pragma omp for schedule(dynamic)
      for (int bg = 0; bg < B * NKV; ++bg) {
        const int b = bg / NKV;
        const int g = bg % NKV;
        float* q = buf.data();
        float* k = q + head_size;
        float* v = k + head_size;
        float* dy = v + head_size;
        float* dq = dy + head_size;
        float* dk = dq + head_size;
        float* dv = dk + head_size;
        load_head(k, qkv, b, T, C, NH, NKV, NH + g);
        load_head(v, qkv, b, T, C, NH, NKV, NH + NKV + g);
        std::fill(dk, dk + 2 * head_size, 0.f);
        for (int h = g * group; h < (g + 1) * group; ++h) {
          load_head(q, qkv, b, T, C, NH, NKV, h);
          std::fill(dq, dq + head_size, 0.f);
          for (int t = 0; t < T; ++t) {
            const int64_t row = (static_cast<int64_t>(b) * T + t) * C + h * HS;
            float* dyt = dy + static_cast<int64_t>(t) * HS;
            float dt = 0.f;
            for (int d = 0; d < HS; ++d) {
              dyt[d] = to_float(dout[row + d]);
              dt += dyt[d] * to_float(out[row + d]);
            }
            D[t] = dt;
          }
          const float* lse_bh = lse + (static_cast<int64_t>(b) * NH + h) * T;  // [T]
          for (int t = 0; t < T; ++t) {
            const float* qt = q + static_cast<int64_t>(t) * HS;
            const float* dyt = dy + static_cast<int64_t>(t) * HS;
            float* dqt = dq + static_cast<int64_t>(t) * HS;
            for (int j = 0; j <= t; ++j) {
              const float* kj = k + static_cast<int64_t>(j) * HS;
              const float* vj = v + static_cast<int64_t>(j) * HS;
              float dot = 0.f;
              float dp = 0.f;
              for (int d = 0; d < HS; ++d) {
                dot += qt[d] * kj[d];
                dp += dyt[d] * vj[d];
              }
              const float p = std::exp(dot * scale - lse_bh[t]);
              const float ds = p * (dp - D[t]) * scale;
              float* dkj = dk + static_cast<int64_t>(j) * HS;
              float* dvj = dv + static_cast<int64_t>(j) * HS;
              for (int d = 0; d < HS; ++d) {
                dqt[d] += ds * kj[d];
                dkj[d] += ds * qt[d];
                dvj[d] += p * dyt[d];
              }
            }
          }
          store_head(dqkv, dq, b, T, C, NH, NKV, h);
        }
        store_head(dqkv, dk, b, T, C, NH, NKV, NH + g);
        store_head(dqkv, dv, b, T, C, NH, NKV, NH + NKV + g);
      }
    }
  }

  // The flash formulation's lse[B,NH,T].
  int64_t attention_saved_floats(int B, int T, int NH) const override {
    return int64_t{B} * NH * T;
  }

  // The vocabulary-parallel cross-entropy's row arithmetic (kernels/vocab_parallel_ce.h) with one
  // rank, a row at a time: as the CUDA kernel, with the max and the sum in two passes instead of
  // online: loss = (max - z_y) + log(sum), gradient dloss * (exp(z - max) / sum - onehot) rounded.
  void softmax_cross_entropy(float* losses, BF16* logits, const int32_t* targets, float dloss,
                             int N, int V, int Vp) {
    WEFT_CHECK(N >= 0 && V > 0 && Vp >= V, "softmax cross-entropy with N=", N, " V=", V,
               " Vp=", Vp);
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * Vp >= kHostMinParallel)
    for (int n = 0; n < N; ++n) {
      BF16* z = logits + static_cast<int64_t>(n) * Vp;  // [Vp], first V real
      float stats[vocab_ce::kStats];
      vocab_ce::row_stats(stats, z, V, targets[n]);
      losses[n] = vocab_ce::finish_row(z, stats, 0, 1, targets[n], dloss, V, Vp, V, 0);
    }
  }

  double linear_forward_seconds(int N, int IC, int OC, int reps) override {
    check_linear_dims(N, IC, OC);
    WEFT_CHECK(N > 0 && reps >= 1, "linear_forward_seconds with N=", N, " reps=", reps);
    return time_linear_forward(N, IC, OC, reps);
  }

 private:
  static void check_swiglu_dims(int N, int F) {
    WEFT_CHECK(N >= 0 && F > 0, "SwiGLU with N=", N, " F=", F);
  }

  // dwte[token - v0, :] += the dout[N, C] rows of the positions whose token is in [v0, v0 + Vl),
  // each token's rows summed in position order in fp32 and added once (as the CUDA plan,
  // host_plans.h: group_tokens).
  static void add_token_rows(float* dwte, const BF16* dout, const int32_t* tokens, int64_t N, int C,
                             int64_t v0, int64_t Vl) {
    // positions: those in range, ordered by (token, position); runs of equal tokens start at
    // run_starts.
    std::vector<int32_t> positions;
    for (int64_t i = 0; i < N; ++i) {
      const int64_t row = static_cast<int64_t>(tokens[i]) - v0;
      if (row >= 0 && row < Vl) positions.push_back(static_cast<int32_t>(i));
    }
    std::stable_sort(positions.begin(), positions.end(),
                     [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
    const int64_t M = static_cast<int64_t>(positions.size());
    std::vector<int64_t> run_starts;
    for (int64_t k = 0; k < M; ++k) {
      if (k == 0 || tokens[positions[k]] != tokens[positions[k - 1]]) run_starts.push_back(k);
    }
    run_starts.push_back(M);
    const int64_t runs = static_cast<int64_t>(run_starts.size()) - 1;
    // Each run owns its dwte row: no two iterations touch the same row.
#pragma omp parallel for schedule(static) if (M * C >= kHostMinParallel)
    for (int64_t r = 0; r < runs; ++r) {
      const int64_t begin = run_starts[r];
      const int64_t end = run_starts[r + 1];
      float* row = dwte + (static_cast<int64_t>(tokens[positions[begin]]) - v0) * C;  // [C]
      for (int c = 0; c < C; ++c) {
        float acc = 0.f;
        for (int64_t k = begin; k < end; ++k) {
          acc += to_float(dout[static_cast<int64_t>(positions[k]) * C + c]);
        }
        row[c] += acc;
      }
    }
  }

  // Head `head` of batch b of qkv[B, T, (NH + 2 NKV) HS] (heads in row order: q's NH, k's NKV,
  // v's NKV) as x[T, HS] in fp32, and back, rounded (HS = C / NH).
  static void load_head(float* x, const BF16* qkv, int b, int T, int C, int NH, int NKV, int head) {
    const int HS = C / NH;
    const int64_t W = static_cast<int64_t>(NH + 2 * NKV) * HS;
    for (int t = 0; t < T; ++t) {
      const BF16* row = qkv + (static_cast<int64_t>(b) * T + t) * W + head * HS;
      for (int d = 0; d < HS; ++d) x[static_cast<int64_t>(t) * HS + d] = to_float(row[d]);
    }
  }
  static void store_head(BF16* qkv, const float* x, int b, int T, int C, int NH, int NKV,
                         int head) {
    const int HS = C / NH;
    const int64_t W = static_cast<int64_t>(NH + 2 * NKV) * HS;
    for (int t = 0; t < T; ++t) {
      BF16* row = qkv + (static_cast<int64_t>(b) * T + t) * W + head * HS;
      for (int d = 0; d < HS; ++d) row[d] = round_bf16(x[static_cast<int64_t>(t) * HS + d]);
    }
  }

  // fp32 copies of GEMM operands and the accumulator, reused across calls.
  std::vector<float> scratch_a_;
  std::vector<float> scratch_b_;
  std::vector<float> scratch_c_;
};

}  // namespace

std::unique_ptr<Backend> make_host_bf16_backend() { return std::make_unique<HostBf16Backend>(); }

}  // namespace weft::kernels
