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
// stored bf16 out). Compiled without -ffast-math: the cross-entropy's NaN rows must stay NaN.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "weft/core/check.h"
#include "weft/core/clock.h"
#include "weft/core/dtype.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/cpu/host_backend.h"
#include "weft/kernels/cpu/reference.h"
#include "weft/kernels/gemm.h"
#include "weft/kernels/kernels.h"
#include "weft/kernels/vocab_parallel_ce.h"

namespace weft::kernels {
namespace {

constexpr float kLayerNormEps = static_cast<float>(ref::kLayerNormEps);

inline float to_float(BF16 x) { return x.to_float(); }
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

// out[n] = float(in[n])
void widen(float* out, const BF16* in, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kHostMinParallel)
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

// Grows a scratch buffer to at least n floats and returns it.
float* scratch(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
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

void check_layernorm_dims(int N, int C) {
  WEFT_CHECK(N >= 0 && C > 0, "LayerNorm with N=", N, " C=", C);
}

void check_linear_dims(int N, int IC, int OC) {
  WEFT_CHECK(N >= 0 && IC > 0 && OC > 0, "linear layer with N=", N, " IC=", IC, " OC=", OC);
}

void check_attention_dims(int B, int T, int C, int NH) {
  WEFT_CHECK(B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0, "attention with B=", B, " T=", T,
             " C=", C, " NH=", NH, " (C must be divisible by NH)");
}

// One row of LayerNorm on x[C] (fp32 values of bf16 inputs): two passes for mean and variance,
// as the CUDA kernel (one warp per row) and ref::layernorm_forward.
void layernorm_row(BF16* y, float* mean, float* rstd, const float* x, const BF16* weight,
                   const BF16* bias, int C) {
  float sum = 0.f;
  for (int c = 0; c < C; ++c) sum += x[c];
  const float m = sum / static_cast<float>(C);
  float var = 0.f;
  for (int c = 0; c < C; ++c) {
    const float d = x[c] - m;
    var += d * d;
  }
  const float s = 1.f / std::sqrt(var / static_cast<float>(C) + kLayerNormEps);
  for (int c = 0; c < C; ++c) {
    y[c] = round_bf16((x[c] - m) * s * to_float(weight[c]) + to_float(bias[c]));
  }
  *mean = m;
  *rstd = s;
}

class HostBf16Backend final : public HostBackend<HostBf16Backend, BF16> {
 public:
  std::string name() const override { return "host"; }

  // ---- ops
  // ---------------------------------------------------------------------------------------

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
      const BF16* p = wpe + (n % T) * C;                          // [C]
      for (int c = 0; c < C; ++c) o[c] = round_bf16(to_float(e[c]) + to_float(p[c]));
    }
  }

  // Tensor-parallel rank's partial embedding: the expression of embedding_forward with the rows
  // this rank does not hold read as 0, so rank 0 (which passes wpe) writes exactly
  // embedding_forward's value for its own tokens, and every other partial is one bf16 row
  // (exact): the fp32 sum over ranks, rounded, is embedding_forward's output.
  void embedding_forward_shard(BF16* out, const int32_t* tokens, const BF16* wte, const BF16* wpe,
                               int B, int T, int C, int v0, int Vl) {
    check_embedding_shard(B, T, C, v0, Vl);
    const int64_t N = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static) if (N * C >= kHostMinParallel)
    for (int64_t n = 0; n < N; ++n) {
      BF16* o = out + n * C;  // [C]
      const int64_t row = static_cast<int64_t>(tokens[n]) - v0;
      const BF16* e = row >= 0 && row < Vl ? wte + row * C : nullptr;  // [C] or none
      const BF16* p = wpe != nullptr ? wpe + (n % T) * C : nullptr;    // [C] or none
      for (int c = 0; c < C; ++c) {
        const float x = e != nullptr ? to_float(e[c]) : 0.f;
        const float y = p != nullptr ? to_float(p[c]) : 0.f;
        o[c] = round_bf16(x + y);
      }
    }
  }

  // As the CUDA kernels: each token's rows are summed in position order in fp32 and the total is
  // added to dwte[token] once; dwpe[t] += the sum over b, in order.
  void embedding_backward(float* dwte, float* dwpe, const BF16* dout, const int32_t* tokens_host,
                          int B, int T, int C) {
    WEFT_CHECK(B >= 0 && T >= 0 && C > 0, "embedding with B=", B, " T=", T, " C=", C);
    const int64_t N = static_cast<int64_t>(B) * T;
    if (N == 0) return;
    for (int64_t i = 0; i < N; ++i) {  // as the CUDA plan (host_plans.h: group_tokens) rejects
      WEFT_CHECK(tokens_host[i] >= 0, "token ", tokens_host[i], " at position ", i, " is negative");
    }
    add_token_rows(dwte, dout, tokens_host, N, C, 0,
                   int64_t{std::numeric_limits<int32_t>::max()} + 1);
    add_position_sums(dwpe, dout, B, T, C);
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
    if (dwpe != nullptr) add_position_sums(dwpe, dout, B, T, C);
  }

  void layernorm_forward(BF16* out, float* mean, float* rstd, const BF16* inp, const BF16* weight,
                         const BF16* bias, int N, int C, Norm norm) {
    WEFT_CHECK(!norm.rms && norm.eps == 1e-5f && bias != nullptr, "TEMP: bf16 norm variants");
    check_layernorm_dims(N, C);
#pragma omp parallel if (static_cast <int64_t>(N) * C >= kHostMinParallel)
    {
      std::vector<float> x(static_cast<size_t>(C));  // [C] the row in fp32
#pragma omp for schedule(static)
      for (int n = 0; n < N; ++n) {
        const int64_t row = static_cast<int64_t>(n) * C;
        for (int c = 0; c < C; ++c) x[c] = to_float(inp[row + c]);
        layernorm_row(out + row, mean + n, rstd + n, x.data(), weight, bias, C);
      }
    }
  }

  void residual_forward(BF16* out, const BF16* a, const BF16* b, int64_t n) {
    WEFT_CHECK(n >= 0, "negative element count ", n);
#pragma omp parallel for schedule(static) if (n >= kHostMinParallel)
    for (int64_t i = 0; i < n; ++i) out[i] = round_bf16(to_float(a[i]) + to_float(b[i]));
  }
  void fused_residual_layernorm_forward(BF16* residual, BF16* out, float* mean, float* rstd,
                                        const BF16* a, const BF16* b, const BF16* weight,
                                        const BF16* bias, int N, int C, Norm norm) {
    WEFT_CHECK(!norm.rms && norm.eps == 1e-5f && bias != nullptr, "TEMP: bf16 norm variants");
    check_layernorm_dims(N, C);
    WEFT_CHECK(residual != nullptr, "fused_residual_layernorm_forward needs a residual output");
#pragma omp parallel if (static_cast <int64_t>(N) * C >= kHostMinParallel)
    {
      std::vector<float> x(static_cast<size_t>(C));  // [C] the rounded residual row in fp32
#pragma omp for schedule(static)
      for (int n = 0; n < N; ++n) {
        const int64_t row = static_cast<int64_t>(n) * C;
        for (int c = 0; c < C; ++c) {
          const BF16 r = round_bf16(to_float(a[row + c]) + to_float(b[row + c]));
          residual[row + c] = r;
          x[c] = to_float(r);  // normalize the rounded value, as layernorm_forward(residual)
        }
        layernorm_row(out + row, mean + n, rstd + n, x.data(), weight, bias, C);
      }
    }
  }

  // dinp += rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm)), dnorm = dout * weight,
  // rounded once into the bf16 dinp; dweight += sum_n dout * norm, dbias += sum_n dout (fp32).
  void layernorm_backward(BF16* dinp, float* dweight, float* dbias, const BF16* dout,
                          const BF16* inp, const BF16* weight, const float* mean, const float* rstd,
                          int N, int C, Norm norm) {
    WEFT_CHECK(!norm.rms && dbias != nullptr, "TEMP: bf16 norm variants");
    check_layernorm_dims(N, C);
    if (N == 0) return;
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * C >= kHostMinParallel)
    for (int n = 0; n < N; ++n) {
      const int64_t row = static_cast<int64_t>(n) * C;
      const BF16* dy = dout + row;  // [C]
      const BF16* x = inp + row;    // [C]
      BF16* dx = dinp + row;        // [C]
      const float m = mean[n];
      const float s = rstd[n];
      float dnorm_sum = 0.f;
      float dnorm_norm_sum = 0.f;
      for (int c = 0; c < C; ++c) {
        const float norm = (to_float(x[c]) - m) * s;
        const float dnorm = to_float(weight[c]) * to_float(dy[c]);
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * norm;
      }
      const float dnorm_mean = dnorm_sum / static_cast<float>(C);
      const float dnorm_norm_mean = dnorm_norm_sum / static_cast<float>(C);
      for (int c = 0; c < C; ++c) {
        const float norm = (to_float(x[c]) - m) * s;
        const float dnorm = to_float(weight[c]) * to_float(dy[c]);
        dx[c] = round_bf16(to_float(dx[c]) + s * (dnorm - dnorm_mean - norm * dnorm_norm_mean));
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
        normed += d * (to_float(inp[i]) - mean[n]) * rstd[n];
      }
      dbias[c] += sum;
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
    float* x = scratch(scratch_a_, in_size);     // [N, IC]
    float* w = scratch(scratch_b_, w_size);      // [OC, IC]
    float* acc = scratch(scratch_c_, out_size);  // [N, OC]
    widen(x, inp, in_size);
    widen(w, weight, w_size);
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
    float* dy = scratch(scratch_a_, out_size);  // [N, OC]
    widen(dy, dout, out_size);
    if (dinp != nullptr) {
      const int64_t w_size = static_cast<int64_t>(OC) * IC;
      float* w = scratch(scratch_b_, w_size);     // [OC, IC]
      float* acc = scratch(scratch_c_, in_size);  // [N, IC]
      widen(w, weight, w_size);
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
      float* x = scratch(scratch_b_, in_size);  // [N, IC]
      widen(x, inp, in_size);
      // dweight[OC, IC] += dout^T @ inp, straight into the fp32 gradient (beta = 1).
      sgemm(true, false, OC, IC, N, 1.f, dy, OC, x, IC, 1.f, dweight, IC);
    }
    if (dbias != nullptr) add_column_sums(dbias, dout, N, OC);
  }

  // Per (b, h): scores s_tj = q_t . k_j / sqrt(HS) for j <= t in fp32, lse_t = logsumexp_j s_tj,
  // out_t = sum_j exp(s_tj - max) v_j / sum_j exp(s_tj - max) (normalized at the end, as the
  // flash forward does), rounded once.
  void swiglu_forward(BF16*, const BF16*, int, int) { WEFT_CHECK(false, "TEMP: bf16 swiglu"); }
  void swiglu_backward(BF16*, const BF16*, const BF16*, int, int) {
    WEFT_CHECK(false, "TEMP: bf16 swiglu");
  }
  void rope(BF16*, int, int, int, int, int, float, bool) { WEFT_CHECK(false, "TEMP: bf16 rope"); }
  void attention_forward(BF16* out, float* lse, const BF16* qkv, int B, int T, int C, int NH,
                         int NKV) {
    WEFT_CHECK(NKV == NH, "TEMP: bf16 GQA");
    check_attention_dims(B, T, C, NH);
    const int HS = C / NH;
    const float scale = 1.f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
    {
      std::vector<float> head(static_cast<size_t>(3) * T * HS);  // q, k, v of the head: [3, T, HS]
      std::vector<float> s(static_cast<size_t>(T));              // [T] one row of scores
      std::vector<float> o(static_cast<size_t>(HS));             // [HS] one output row
#pragma omp for schedule(dynamic)
      for (int bh = 0; bh < B * NH; ++bh) {
        const int b = bh / NH;
        const int h = bh % NH;
        float* q = head.data();
        float* k = q + static_cast<int64_t>(T) * HS;
        float* v = k + static_cast<int64_t>(T) * HS;
        load_head(q, k, v, qkv, b, h, T, C, HS);
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
  // rounded.
  void attention_backward(BF16* dqkv, const BF16* dout, const BF16* qkv, const BF16* out,
                          const float* lse, int B, int T, int C, int NH, int NKV) {
    WEFT_CHECK(NKV == NH, "TEMP: bf16 GQA");
    check_attention_dims(B, T, C, NH);
    const int HS = C / NH;
    const float scale = 1.f / std::sqrt(static_cast<float>(HS));
    const int64_t head_size = static_cast<int64_t>(T) * HS;
#pragma omp parallel
    {
      // q, k, v, dout of the head, then dq, dk, dv: [7, T, HS]
      std::vector<float> buf(static_cast<size_t>(7 * head_size));
      std::vector<float> D(static_cast<size_t>(T));  // [T]
#pragma omp for schedule(dynamic)
      for (int bh = 0; bh < B * NH; ++bh) {
        const int b = bh / NH;
        const int h = bh % NH;
        float* q = buf.data();
        float* k = q + head_size;
        float* v = k + head_size;
        float* dy = v + head_size;
        float* dq = dy + head_size;
        float* dk = dq + head_size;
        float* dv = dk + head_size;
        load_head(q, k, v, qkv, b, h, T, C, HS);
        std::fill(dq, dq + 3 * head_size, 0.f);
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
        for (int t = 0; t < T; ++t) {
          BF16* row = dqkv + (static_cast<int64_t>(b) * T + t) * 3 * C + h * HS;  // q part
          const int64_t at = static_cast<int64_t>(t) * HS;
          for (int d = 0; d < HS; ++d) {
            row[d] = round_bf16(dq[at + d]);
            row[C + d] = round_bf16(dk[at + d]);
            row[2 * C + d] = round_bf16(dv[at + d]);
          }
        }
      }
    }
  }

  bool attention_supports(int C, int NH) const override { return NH > 0 && C > 0 && C % NH == 0; }
  // The flash formulation's lse[B,NH,T].
  int64_t attention_saved_floats(int B, int T, int NH) const override {
    return int64_t{B} * NH * T;
  }

  // As the CUDA kernel, with the max and the sum in two passes instead of online: loss =
  // (max - z_y) + log(sum), gradient dloss * (exp(z - max) / sum - onehot) rounded.
  void softmax_cross_entropy(float* losses, BF16* logits, const int32_t* targets, float dloss,
                             int N, int V, int Vp) {
    WEFT_CHECK(N >= 0 && V > 0 && Vp >= V, "softmax cross-entropy with N=", N, " V=", V,
               " Vp=", Vp);
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * Vp >= kHostMinParallel)
    for (int n = 0; n < N; ++n) {
      BF16* z = logits + static_cast<int64_t>(n) * Vp;  // [Vp], first V real
      const int32_t y = targets[n];
      if (y < 0 || y >= V) {  // ignored row: loss 0, gradient 0; bad target: NaN (visible)
        const float fill = y < 0 ? 0.f : std::numeric_limits<float>::quiet_NaN();
        losses[n] = fill;
        for (int j = 0; j < Vp; ++j) z[j] = round_bf16(j < V ? fill : 0.f);
        continue;
      }
      float m = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < V; ++j) m = std::max(m, to_float(z[j]));
      float s = 0.f;
      for (int j = 0; j < V; ++j) s += std::exp(to_float(z[j]) - m);
      losses[n] = (m - to_float(z[y])) + std::log(s);
      const float inv_s = 1.f / s;
      for (int j = 0; j < V; ++j) {
        const float p = std::exp(to_float(z[j]) - m) * inv_s;
        z[j] = round_bf16(dloss * (p - (j == y ? 1.f : 0.f)));
      }
      for (int j = V; j < Vp; ++j) z[j] = round_bf16(0.f);
    }
  }

  // The vocabulary-parallel cross-entropy of kernels/vocab_parallel_ce.h, whose arithmetic it
  // calls: with tp = 1 and v0 = 0 the bits of softmax_cross_entropy.
  void cross_entropy_shard_stats(float* stats, const BF16* logits, const int32_t* targets, int N,
                                 int Vl, int Vv, int v0) {
    check_cross_entropy_shard(N, Vl, Vv, v0);
    vocab_ce::host_stats(stats, logits, targets, N, Vl, Vv, v0, [](BF16 x) { return to_float(x); });
  }
  void cross_entropy_shard_finish(float* losses, BF16* logits, const float* all_stats, int tp,
                                  const int32_t* targets, float dloss, int N, int V, int Vl, int Vv,
                                  int v0) {
    check_cross_entropy_shard(N, Vl, Vv, v0);
    WEFT_CHECK(tp >= 1 && V > 0 && Vv == vocab_ce::real_columns(V, v0, Vl),
               "vocabulary-parallel cross-entropy with tp=", tp, " V=", V, " v0=", v0, " Vl=", Vl,
               " Vv=", Vv, " (Vv must be max(0, min(Vl, V - v0)))");
    vocab_ce::host_finish(
        losses, logits, all_stats, tp, targets, dloss, N, V, Vl, Vv, v0,
        [](BF16 x) { return to_float(x); }, [](float x) { return round_bf16(x); });
  }

  double linear_forward_seconds(int N, int IC, int OC, int reps) override {
    check_linear_dims(N, IC, OC);
    WEFT_CHECK(N > 0 && reps >= 1, "linear_forward_seconds with N=", N, " reps=", reps);
    const BF16 small = round_bf16(0.01f);
    std::vector<BF16> inp(static_cast<size_t>(N) * IC, small);
    std::vector<BF16> weight(static_cast<size_t>(OC) * IC, small);
    std::vector<BF16> out(static_cast<size_t>(N) * OC);
    linear_forward(out.data(), nullptr, inp.data(), weight.data(), nullptr, N, IC, OC);  // warm-up
    std::vector<double> seconds(static_cast<size_t>(reps));
    for (double& s : seconds) {
      const auto start = std::chrono::steady_clock::now();
      linear_forward(out.data(), nullptr, inp.data(), weight.data(), nullptr, N, IC, OC);
      s = seconds_since(start);
    }
    std::nth_element(seconds.begin(), seconds.begin() + reps / 2, seconds.end());
    return seconds[static_cast<size_t>(reps / 2)];
  }

 private:
  static void check_embedding_shard(int B, int T, int C, int v0, int Vl) {
    WEFT_CHECK(B >= 0 && T >= 0 && C > 0 && v0 >= 0 && Vl >= 0, "embedding shard with B=", B,
               " T=", T, " C=", C, " v0=", v0, " Vl=", Vl);
  }
  static void check_cross_entropy_shard(int N, int Vl, int Vv, int v0) {
    WEFT_CHECK(N >= 0 && Vl > 0 && Vv >= 0 && Vv <= Vl && v0 >= 0,
               "vocabulary-parallel cross-entropy with N=", N, " Vl=", Vl, " Vv=", Vv, " v0=", v0);
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

  // dwpe[T, C] += the sum over b of dout[B, T, C], b in order.
  static void add_position_sums(float* dwpe, const BF16* dout, int B, int T, int C) {
    const int64_t TC = static_cast<int64_t>(T) * C;
#pragma omp parallel for schedule(static) if (B * TC >= kHostMinParallel)
    for (int64_t i = 0; i < TC; ++i) {
      float acc = 0.f;
      for (int b = 0; b < B; ++b) acc += to_float(dout[b * TC + i]);
      dwpe[i] += acc;
    }
  }

  // q, k, v [T, HS] (fp32) of head h of batch b from qkv[B, T, 3C].
  static void load_head(float* q, float* k, float* v, const BF16* qkv, int b, int h, int T, int C,
                        int HS) {
    for (int t = 0; t < T; ++t) {
      const BF16* row = qkv + (static_cast<int64_t>(b) * T + t) * 3 * C + h * HS;
      const int64_t at = static_cast<int64_t>(t) * HS;
      for (int d = 0; d < HS; ++d) {
        q[at + d] = to_float(row[d]);
        k[at + d] = to_float(row[C + d]);
        v[at + d] = to_float(row[2 * C + d]);
      }
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
