#pragma once
// Reference CPU kernels: one function template per op of weft/kernels/ops.inc (and the loss
// alone, softmax_cross_entropy_forward), same parameter names and order, with T in place of float.
// They are written to be READ, not to be fast: plain loops, no OpenMP, no BLAS. The optimized
// kernels (cpu/ops_cpu.cc, cuda/) are tested against these, and these are tested against finite
// differences (T = double) in tests/kernels/reference_test.cc.
//
// Conventions (see ops.inc): row-major; shape letters B, T, C, V, NH, HS = C/NH, NKV (key/value
// heads of grouped-query attention), F (SwiGLU's hidden width); N = B*T rows.
// The gradient rule (docs/training.md, "Gradients: written or accumulated"): an activation
// gradient is WRITTEN (=), except layernorm_backward's dinp, which ADDS into the residual stream's
// gradient; every parameter gradient ADDS (+=).
//
// The element type is the template parameter `T`, except in the functions that also take the
// sequence length `int T` (embedding, attention): a parameter may not reuse a template
// parameter's name, so there the element type is called `Real`.

#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>
#include <utility>

#include "weft/core/check.h"
#include "weft/kernels/kernels.h"

namespace weft::kernels::ref {

// Nondeduced<X> is X, but T is deduced from the other arguments only: so `nullptr` may be passed
// for a nullable pointer (bias, dinp, dbias) and a double literal for a scalar (lr, dloss)
// when T = float.
template <typename X>
using Nondeduced = std::type_identity_t<X>;

// ---- token + position embedding -----------------------------------------------------------

// out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :]  (wpe null: no position table, a rotary model)
template <typename Real>
void embedding_forward(Real* out, const int32_t* tokens, const Real* wte,
                       Nondeduced<const Real*> wpe, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      Real* out_bt = out + (static_cast<int64_t>(b) * T + t) * C;  // [C]
      const int32_t ix = tokens[b * T + t];
      const Real* wte_ix = wte + static_cast<int64_t>(ix) * C;  // [C]
      for (int c = 0; c < C; ++c) {
        out_bt[c] = wte_ix[c] + (wpe != nullptr ? wpe[static_cast<int64_t>(t) * C + c] : Real(0));
      }
    }
  }
}

// dwte[V,C] += scatter of dout rows by token; dwpe[T,C] += sum over b of dout (dwpe may be null)
template <typename Real>
void embedding_backward(Real* dwte, Nondeduced<Real*> dwpe, const Real* dout, const int32_t* tokens,
                        int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const Real* dout_bt = dout + (static_cast<int64_t>(b) * T + t) * C;  // [C]
      const int32_t ix = tokens[b * T + t];
      Real* dwte_ix = dwte + static_cast<int64_t>(ix) * C;  // [C]
      for (int c = 0; c < C; ++c) {
        dwte_ix[c] += dout_bt[c];
        if (dwpe != nullptr) dwpe[static_cast<int64_t>(t) * C + c] += dout_bt[c];
      }
    }
  }
}

// ---- LayerNorm or RMSNorm over the last dim -----------------------------------------------
// LayerNorm: Ba, Kiros & Hinton 2016, "Layer Normalization"; biased variance (divide by C), eps
// inside the square root, as torch.nn.LayerNorm. RMSNorm: Zhang & Sennrich 2019, "Root Mean Square
// Layer Normalization" (Llama's): no centring and no bias, rstd = 1/sqrt(mean(x^2) + eps), which
// is LayerNorm's formula with the mean taken as 0. norm.eps is the epsilon of either.

// LayerNorm: out[N,C] = (inp - mean) * rstd * weight + bias (bias may be null: none); saves
// mean[N], rstd[N] for backward. RMSNorm (norm.rms): out = inp * rstd * weight; saves rstd[N];
// mean and bias are null.
template <typename T>
void layernorm_forward(T* out, Nondeduced<T*> mean, T* rstd, const T* inp, const T* weight,
                       Nondeduced<const T*> bias, int N, int C, Norm norm = {}) {
  WEFT_CHECK(!norm.rms || (mean == nullptr && bias == nullptr), "RMSNorm has no mean or bias");
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<int64_t>(n) * C;  // [C]
    T* y = out + static_cast<int64_t>(n) * C;        // [C]
    T m = 0;                                         // RMSNorm: the statistics of x - 0
    if (!norm.rms) {
      for (int c = 0; c < C; ++c) m += x[c];
      m /= C;
    }
    T var = 0;  // biased variance: mean of squared deviations (RMSNorm: mean of squares)
    for (int c = 0; c < C; ++c) {
      const T d = x[c] - m;
      var += d * d;
    }
    var /= C;
    const T s = T(1) / std::sqrt(var + static_cast<T>(norm.eps));
    for (int c = 0; c < C; ++c) {
      const T normed = (x[c] - m) * s;
      y[c] = normed * weight[c] + (bias != nullptr ? bias[c] : T(0));
    }
    if (mean != nullptr) mean[n] = m;
    rstd[n] = s;
  }
}

// dinp[N,C] += (the one activation gradient that adds: it lands in the residual stream's gradient,
// which already holds the residual branch's part), dweight[C] +=, dbias[C] += (null: no bias)
// With norm = (x - mean) * rstd and dnorm = dout * weight:
//   dbias   += dout
//   dweight += dout * norm
//   dinp    += rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm))
// RMSNorm (mean 0, not a function of x): dinp += rstd * (dnorm - norm * mean_c(dnorm * norm)).
template <typename T>
void layernorm_backward(T* dinp, T* dweight, Nondeduced<T*> dbias, const T* dout, const T* inp,
                        const T* weight, Nondeduced<const T*> mean, const T* rstd, int N, int C,
                        Norm norm = {}) {
  WEFT_CHECK(!norm.rms || (mean == nullptr && dbias == nullptr), "RMSNorm has no mean or bias");
  for (int n = 0; n < N; ++n) {
    const T* dy = dout + static_cast<int64_t>(n) * C;  // [C]
    const T* x = inp + static_cast<int64_t>(n) * C;    // [C]
    T* dx = dinp + static_cast<int64_t>(n) * C;        // [C]
    const T m = norm.rms ? T(0) : mean[n];
    const T s = rstd[n];
    // Two reductions over C.
    T dnorm_mean = 0;
    T dnorm_norm_mean = 0;
    for (int c = 0; c < C; ++c) {
      const T normed = (x[c] - m) * s;
      const T dnorm = weight[c] * dy[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * normed;
    }
    dnorm_mean = norm.rms ? T(0) : dnorm_mean / C;
    dnorm_norm_mean /= C;
    for (int c = 0; c < C; ++c) {
      const T normed = (x[c] - m) * s;
      const T dnorm = weight[c] * dy[c];
      if (dbias != nullptr) dbias[c] += dy[c];
      dweight[c] += normed * dy[c];
      dx[c] += s * (dnorm - dnorm_mean - normed * dnorm_norm_mean);
    }
  }
}

// ---- linear --------------------------------------------------------------------------------

// out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias[OC]   (bias may be null)
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, Nondeduced<const T*> bias, int N, int IC,
                    int OC) {
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<int64_t>(n) * IC;  // [IC]
    T* y = out + static_cast<int64_t>(n) * OC;        // [OC]
    for (int o = 0; o < OC; ++o) {
      const T* w = weight + static_cast<int64_t>(o) * IC;  // [IC]
      T acc = bias != nullptr ? bias[o] : T(0);
      for (int i = 0; i < IC; ++i) acc += x[i] * w[i];
      y[o] = acc;
    }
  }
}

// dinp[N,IC] = dout @ weight (written); dweight[OC,IC] += dout^T @ inp; dbias[OC] += sum_n dout
// (if bias). dinp may be null (no input gradient needed, e.g. for a first layer); dweight and dbias
// may be null (weight gradients deferred).
template <typename T>
void matmul_backward(Nondeduced<T*> dinp, Nondeduced<T*> dweight, Nondeduced<T*> dbias,
                     const T* dout, const T* inp, const T* weight, int N, int IC, int OC) {
  for (int n = 0; n < N; ++n) {
    const T* dy = dout + static_cast<int64_t>(n) * OC;  // [OC]
    const T* x = inp + static_cast<int64_t>(n) * IC;    // [IC]
    if (dinp != nullptr) {
      T* dx = dinp + static_cast<int64_t>(n) * IC;  // [IC]
      for (int i = 0; i < IC; ++i) {
        T acc = 0;
        for (int o = 0; o < OC; ++o) acc += dy[o] * weight[static_cast<int64_t>(o) * IC + i];
        dx[i] = acc;
      }
    }
    for (int o = 0; o < OC; ++o) {
      const T g = dy[o];
      if (dweight != nullptr) {
        T* dw = dweight + static_cast<int64_t>(o) * IC;  // [IC]
        for (int i = 0; i < IC; ++i) dw[i] += g * x[i];
      }
      if (dbias != nullptr) dbias[o] += g;
    }
  }
}

// ---- causal self-attention core (grouped-query) ---------------------------------------------
// Vaswani et al. 2017, scaled dot-product attention, scale 1/sqrt(HS), with a causal mask;
// grouped-query (Ainslie et al. 2023): NKV key/value heads, each read by a group of NH/NKV
// consecutive query heads (NKV == NH: multi-head attention; NKV == 1: multi-query).
// Masked entries (j > t) are not -inf: they are skipped in every sum and written as 0.

// qkv[B,T,W], W = C + 2*NKV*HS, holds q (NH heads), k (NKV heads), v (NKV heads) side by side:
// query head h uses columns [h*HS, (h+1)*HS), its key/value head g = h / (NH/NKV) the columns
// C + g*HS.. of k and C + NKV*HS + g*HS.. of v; HS = C/NH.
// att[B,NH,T,T] = softmax_j<=t(q_t . k_j / sqrt(HS)) (entries j > t are written as 0);
// out[B,T,C] = att @ v, heads concatenated.
template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int C, int NH,
                       int NKV) {
  WEFT_CHECK(NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0, "attention with C=", C, " NH=", NH,
             " NKV=", NKV);
  const int HS = C / NH;
  const int group = NH / NKV;                                // query heads per key/value head
  const int64_t W = C + 2 * static_cast<int64_t>(NKV) * HS;  // qkv's row width
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(HS));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int64_t k_col = C + static_cast<int64_t>(h / group) * HS;  // its key head's columns
      const int64_t v_col = k_col + static_cast<int64_t>(NKV) * HS;    // and value head's
      for (int t = 0; t < T; ++t) {
        const Real* q = qkv + (static_cast<int64_t>(b) * T + t) * W + h * HS;  // [HS]
        Real* att_t = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;  // [T]
        // Scores q_t . k_j * scale for j <= t, and their max (for a stable softmax).
        for (int j = 0; j <= t; ++j) {
          const Real* k = qkv + (static_cast<int64_t>(b) * T + j) * W + k_col;  // [HS]
          Real dot = 0;
          for (int d = 0; d < HS; ++d) dot += q[d] * k[d];
          att_t[j] = dot * scale;
        }
        Real maxval = att_t[0];
        for (int j = 1; j <= t; ++j) maxval = att_t[j] > maxval ? att_t[j] : maxval;
        // Softmax over j <= t; j > t written as 0.
        Real sum = 0;
        for (int j = 0; j <= t; ++j) {
          att_t[j] = std::exp(att_t[j] - maxval);
          sum += att_t[j];
        }
        for (int j = 0; j <= t; ++j) att_t[j] /= sum;
        for (int j = t + 1; j < T; ++j) att_t[j] = 0;
        // out[b,t,h*HS:(h+1)*HS] = sum_{j<=t} att[t,j] * v_j
        Real* o = out + (static_cast<int64_t>(b) * T + t) * C + h * HS;  // [HS]
        for (int d = 0; d < HS; ++d) o[d] = 0;
        for (int j = 0; j <= t; ++j) {
          const Real* v = qkv + (static_cast<int64_t>(b) * T + j) * W + v_col;  // [HS]
          for (int d = 0; d < HS; ++d) o[d] += att_t[j] * v[d];
        }
      }
    }
  }
}

// dqkv[B,T,W] = gradient through the attention core (written), given the saved att
// probabilities. With s[t,j] = scale * q_t . k_j, a = softmax_j(s), out_t = sum_j a[t,j] v_j:
//   da[t,j]  = dout_t . v_j              dv_j = sum_{t>=j} a[t,j] * dout_t
//   ds[t,j]  = a[t,j] * (da[t,j] - sum_{j'<=t} a[t,j'] da[t,j'])   (softmax Jacobian)
//   dq_t     = scale * sum_j ds[t,j] k_j    dk_j = scale * sum_{t>=j} ds[t,j] q_t
// A key/value head's dk and dv also sum over the query heads of its group. Each of dq, dk, dv is a
// sum, so dqkv is zeroed first and the terms added to it.
template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int B,
                        int T, int C, int NH, int NKV) {
  WEFT_CHECK(NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0, "attention with C=", C, " NH=", NH,
             " NKV=", NKV);
  const int HS = C / NH;
  const int group = NH / NKV;
  const int64_t W = C + 2 * static_cast<int64_t>(NKV) * HS;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(HS));
  for (int64_t i = 0; i < static_cast<int64_t>(B) * T * W; ++i) dqkv[i] = 0;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int64_t k_col = C + static_cast<int64_t>(h / group) * HS;
      const int64_t v_col = k_col + static_cast<int64_t>(NKV) * HS;
      for (int t = 0; t < T; ++t) {
        const int64_t row_t = (static_cast<int64_t>(b) * T + t) * W;
        const Real* q = qkv + row_t + h * HS;                                        // [HS]
        Real* dq = dqkv + row_t + h * HS;                                            // [HS]
        const Real* att_t = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;  // [T]
        const Real* dy = dout + (static_cast<int64_t>(b) * T + t) * C + h * HS;      // [HS]
        // da[j] = dout_t . v_j, and dv_j += a[t,j] dout_t
        // (a local buffer would be natural; recomputing keeps this allocation-free and plain)
        Real weighted = 0;  // sum_j a[t,j] da[t,j]
        for (int j = 0; j <= t; ++j) {
          const int64_t row_j = (static_cast<int64_t>(b) * T + j) * W;
          const Real* v = qkv + row_j + v_col;  // [HS]
          Real* dv = dqkv + row_j + v_col;      // [HS]
          Real da = 0;
          for (int d = 0; d < HS; ++d) {
            da += dy[d] * v[d];
            dv[d] += att_t[j] * dy[d];
          }
          weighted += att_t[j] * da;
        }
        for (int j = 0; j <= t; ++j) {
          const int64_t row_j = (static_cast<int64_t>(b) * T + j) * W;
          const Real* v = qkv + row_j + v_col;  // [HS]
          const Real* k = qkv + row_j + k_col;  // [HS]
          Real* dk = dqkv + row_j + k_col;      // [HS]
          Real da = 0;
          for (int d = 0; d < HS; ++d) da += dy[d] * v[d];
          const Real ds = att_t[j] * (da - weighted) * scale;
          for (int d = 0; d < HS; ++d) {
            dq[d] += ds * k[d];
            dk[d] += ds * q[d];
          }
        }
      }
    }
  }
}

// ---- rotary position embedding ---------------------------------------------------------------
// Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding", in the
// rotate-half pairing of GPT-NeoX, Megatron-LM and Hugging Face's Llama: within a head, elements
// i and i + HS/2 (i < HS/2) form a pair rotated by the angle a = t * theta^(-2i/HS) of the row's
// position t:
//   (x1, x2) -> (x1 cos a - x2 sin a, x2 cos a + x1 sin a)
// In place on qkv[B,T,(NH+2*NKV)*HS]'s first NH + NKV heads (q, then k; v is not rotated). The
// angle is computed in double and its cos and sin rounded to Real. inverse rotates by -a: a
// rotation's inverse is its transpose, so the inverse applied to dqkv is the backward.
template <typename Real>
void rope(Real* qkv, int B, int T, int NH, int NKV, int HS, Nondeduced<Real> theta, bool inverse) {
  WEFT_CHECK(HS % 2 == 0, "rotary embeddings need an even head size, got ", HS);
  const int half = HS / 2;
  const int64_t W = static_cast<int64_t>(NH + 2 * NKV) * HS;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      Real* row = qkv + (static_cast<int64_t>(b) * T + t) * W;  // [W]
      for (int h = 0; h < NH + NKV; ++h) {
        Real* x = row + static_cast<int64_t>(h) * HS;  // [HS]
        for (int i = 0; i < half; ++i) {
          const double a = t * std::pow(static_cast<double>(theta), -2.0 * i / HS);
          const Real c = static_cast<Real>(std::cos(a));
          const Real sn = static_cast<Real>(inverse ? -std::sin(a) : std::sin(a));
          const Real x1 = x[i], x2 = x[i + half];
          x[i] = x1 * c - x2 * sn;
          x[i + half] = x2 * c + x1 * sn;
        }
      }
    }
  }
}

// ---- SwiGLU ----------------------------------------------------------------------------------
// Shazeer 2020, "GLU Variants Improve Transformer" (Llama's MLP): the gate g and the up
// projection u side by side in one row, out = silu(g) * u, silu(g) = g * sigmoid(g).

// out[N,F] = silu(inp[:, :F]) * inp[:, F:2F]
template <typename T>
void swiglu_forward(T* out, const T* inp, int N, int F) {
  for (int n = 0; n < N; ++n) {
    const T* g = inp + static_cast<int64_t>(n) * 2 * F;  // [F] gate
    const T* u = g + F;                                  // [F] up
    T* o = out + static_cast<int64_t>(n) * F;            // [F]
    for (int j = 0; j < F; ++j) {
      const T sig = T(1) / (T(1) + std::exp(-g[j]));
      o[j] = g[j] * sig * u[j];
    }
  }
}

// dinp[N,2F] (written): with sig = sigmoid(g), silu'(g) = sig (1 + g (1 - sig)):
//   dg = dout * u * silu'(g),  du = dout * silu(g)
template <typename T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, int N, int F) {
  for (int n = 0; n < N; ++n) {
    const T* g = inp + static_cast<int64_t>(n) * 2 * F;  // [F]
    const T* u = g + F;                                  // [F]
    const T* dy = dout + static_cast<int64_t>(n) * F;    // [F]
    T* dg = dinp + static_cast<int64_t>(n) * 2 * F;      // [F]
    T* du = dg + F;                                      // [F]
    for (int j = 0; j < F; ++j) {
      const T sig = T(1) / (T(1) + std::exp(-g[j]));
      dg[j] = dy[j] * u[j] * sig * (T(1) + g[j] * (T(1) - sig));
      du[j] = dy[j] * g[j] * sig;
    }
  }
}

// ---- GeLU (tanh approximation, as GPT-2) ---------------------------------------------------
// Hendrycks & Gimpel 2016, "Gaussian Error Linear Units", tanh approximation (used by GPT-2):
// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  const T k = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = k * (x + T(0.044715) * x * x * x);
    out[i] = T(0.5) * x * (T(1) + std::tanh(u));
  }
}

// dinp = dout * d/dx[0.5 x (1 + tanh(u))]   (written; dinp may be dout itself)
//      = dout * (0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) du/dx),  du/dx = k (1 + 3 0.044715 x^2)
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  const T k = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = k * (x + T(0.044715) * x * x * x);
    const T th = std::tanh(u);
    const T du_dx = k * (T(1) + T(3) * T(0.044715) * x * x);
    const T grad = T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du_dx;
    dinp[i] = grad * dout[i];
  }
}

// ---- residual add --------------------------------------------------------------------------

// out = a + b
template <typename T>
void residual_forward(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// ---- fused softmax + cross-entropy over a padded vocabulary ---------------------------------
// Numerically stable softmax: subtract the row max before exp. Only columns < V are real.
//   loss = -log softmax(z)[y] = (max - z_y) + log(sum_j exp(z_j - max))

// One row's softmax statistics over its V real columns: the max (subtracted for stability) and
// sum_j exp(z_j - max). log softmax(z)_y = (z_y - max) - log(sum).
template <typename T>
std::pair<T, T> softmax_row_stats(const T* z, int V) {
  T maxval = z[0];
  for (int j = 1; j < V; ++j) maxval = z[j] > maxval ? z[j] : maxval;
  T sum = 0;
  for (int j = 0; j < V; ++j) sum += std::exp(z[j] - maxval);
  return {maxval, sum};
}

// logits[N,Vp]: only the first V columns are real; padding columns never get probability.
// losses[N] = -log softmax(logits[n, :V])[targets[n]]; a target < 0 is ignored (loss 0).
template <typename T>
void softmax_cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V,
                                   int Vp) {
  for (int n = 0; n < N; ++n) {
    const T* z = logits + static_cast<int64_t>(n) * Vp;  // [Vp], first V real
    const int32_t y = targets[n];
    if (y < 0) {
      losses[n] = 0;
      continue;
    }
    WEFT_CHECK(y < V, "target ", y, " at row ", n, " is outside the vocabulary V=", V);
    const auto [maxval, sum] = softmax_row_stats(z, V);
    losses[n] = (maxval - z[y]) + std::log(sum);
  }
}

// Forward and backward in one pass: writes losses[N] and OVERWRITES logits in place with
// dloss * (softmax - onehot(target)) in columns < V and 0 in the padding (and 0 for ignored rows).
template <typename T>
void softmax_cross_entropy_fused(T* losses, T* logits, const int32_t* targets, Nondeduced<T> dloss,
                                 int N, int V, int Vp) {
  for (int n = 0; n < N; ++n) {
    T* z = logits + static_cast<int64_t>(n) * Vp;  // [Vp], first V real; becomes the gradient
    const int32_t y = targets[n];
    if (y < 0) {
      losses[n] = 0;
      for (int j = 0; j < Vp; ++j) z[j] = 0;
      continue;
    }
    WEFT_CHECK(y < V, "target ", y, " at row ", n, " is outside the vocabulary V=", V);
    const auto [maxval, sum] = softmax_row_stats(z, V);
    losses[n] = (maxval - z[y]) + std::log(sum);
    // Overwrite with dloss * (p - onehot(y)); p_j = exp(z_j - max) / sum.
    for (int j = 0; j < V; ++j) {
      const T p = std::exp(z[j] - maxval) / sum;
      z[j] = dloss * (p - (j == y ? T(1) : T(0)));
    }
    for (int j = V; j < Vp; ++j) z[j] = 0;
  }
}

// ---- optimizer -----------------------------------------------------------------------------

// AdamW: Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", with Adam's bias
// correction (Kingma & Ba 2015); step t >= 1.
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd
// p)
template <typename T>
void adamw_update(T* params, const T* grads, T* m, T* v, int64_t n, Nondeduced<T> lr,
                  Nondeduced<T> beta1, Nondeduced<T> beta2, Nondeduced<T> eps,
                  Nondeduced<T> weight_decay, int t) {
  const T correction1 = T(1) - std::pow(beta1, static_cast<T>(t));
  const T correction2 = T(1) - std::pow(beta2, static_cast<T>(t));
  for (int64_t i = 0; i < n; ++i) {
    const T g = grads[i];
    m[i] = beta1 * m[i] + (T(1) - beta1) * g;
    v[i] = beta2 * v[i] + (T(1) - beta2) * g * g;
    const T mhat = m[i] / correction1;
    const T vhat = v[i] / correction2;
    params[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * params[i]);
  }
}

// sum of squares in double (for the global gradient norm across slices and ranks)
template <typename T>
double sum_squares(const T* x, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double xi = static_cast<double>(x[i]);
    acc += xi * xi;
  }
  return acc;
}

}  // namespace weft::kernels::ref
