// The optimized CPU kernels (weft::kernels::cpu, sgemm) against the reference templates
// (weft::kernels::ref, run in double on the same inputs) at odd and medium sizes, plus the
// properties the callers rely on: ops.inc's gradient rule (activation gradients written whatever
// the buffer held, layernorm_backward's dinp and parameter gradients added into pre-filled
// values), exact zeros in the masked attention triangle and in padded vocabulary columns, ignored
// targets, and bit-identical results from run to run.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "support/kernel_reference.h"
#include "support/reference_gemm.h"
#include "support/rel_error.h"
#include "weft/kernels/gemm.h"
#include "weft/kernels/kernels.h"

namespace weft::kernels {
namespace {

using test::reference_gemm;
using test::rel_error;

using Floats = std::vector<float>;
using Doubles = std::vector<double>;

constexpr double kRelTol = 1e-5;

Floats random_floats(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats x(static_cast<size_t>(n));
  for (float& v : x) v = dist(gen);
  return x;
}

std::vector<int32_t> random_tokens(int64_t n, int V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> x(static_cast<size_t>(n));
  for (int32_t& v : x) v = dist(gen);
  return x;
}

Doubles to_double(const Floats& x) { return Doubles(x.begin(), x.end()); }

double max_abs_error(const Floats& a, const Doubles& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// The bits of a double as two floats' worth of storage, for bit_identical.
Floats bits_of(double x) {
  Floats f(2);
  std::memcpy(f.data(), &x, sizeof(double));
  return f;
}

bool bit_identical(const Floats& a, const Floats& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

#define EXPECT_CLOSE(actual, reference) \
  EXPECT_LT(rel_error((actual), (reference)), kRelTol) << #actual " vs reference"

// A gradient buffer for a backward kernel run twice: from zeros (`zero`, compared with the
// reference) and from `prefill` (`filled`). A gradient that adds (ops.inc's rule: parameter
// gradients and layernorm_backward's dinp) must end as prefill + the zero-start result
// (EXPECT_ADDED); prefill is random for those. A written one (every other activation gradient)
// must end as the zero-start result bit for bit (EXPECT_WRITTEN); its prefill is NaN, so a kernel
// that adds, or a GEMM with beta = 0 that still reads C, leaves NaN behind.
struct Grad {
  Floats zero, prefill, filled;
  Grad(int64_t n, uint32_t seed)
      : zero(static_cast<size_t>(n), 0.f), prefill(random_floats(n, seed)), filled(prefill) {}
  static Grad written(int64_t n) {
    Grad g(n, 0);
    std::fill(g.prefill.begin(), g.prefill.end(), std::numeric_limits<float>::quiet_NaN());
    g.filled = g.prefill;
    return g;
  }
  Doubles ref() const { return Doubles(zero.size(), 0.0); }
};

#define EXPECT_ADDED(grad)                                                                       \
  do {                                                                                           \
    double scale_ = 0.0, worst_ = 0.0;                                                           \
    for (size_t i_ = 0; i_ < (grad).zero.size(); ++i_) {                                         \
      scale_ = std::max(scale_, std::abs(double{(grad).zero[i_]}));                              \
      worst_ = std::max(                                                                         \
          worst_, std::abs((grad).filled[i_] - (double{(grad).prefill[i_]} + (grad).zero[i_]))); \
    }                                                                                            \
    EXPECT_LE(worst_, 1e-5 * (1.0 + scale_)) << #grad " does not add into its prefilled values"; \
  } while (0)

#define EXPECT_WRITTEN(grad)                             \
  EXPECT_TRUE(bit_identical((grad).filled, (grad).zero)) \
      << #grad " depends on what its buffer held before (it must be written, not added)"

// ---- shapes --------------------------------------------------------------------------------

struct Shape {
  std::string name;
  int B, T, C, NH, V, Vp;
  int N() const { return B * T; }
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.name << " {B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH << " V=" << s.V
      << " Vp=" << s.Vp << "}";
}

// Odd: small, with sizes that are not multiples of the vector width (T = 17, V = 101; the linear
// layers use N = 51, IC = 37, OC = 45); T = 17 is a single attention block. Medium: T = 130 crosses
// two attention block boundaries (64) and ends in a short block.
const Shape kOdd{"Odd", 3, 17, 48, 3, 101, 128};
const Shape kMedium{"Medium", 4, 130, 192, 6, 1000, 1024};

class CpuKernelsMatchTheReference : public ::testing::TestWithParam<Shape> {};

// ---- embedding -----------------------------------------------------------------------------

TEST_P(CpuKernelsMatchTheReference, EmbeddingForward) {
  const Shape s = GetParam();
  const auto tokens = random_tokens(s.N(), s.V, 1);
  const Floats wte = random_floats(int64_t{s.V} * s.C, 2);
  const Floats wpe = random_floats(int64_t{s.T} * s.C, 3);
  Floats out(static_cast<size_t>(s.N()) * s.C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C);
  Doubles ref_out(out.size());
  const Doubles wte_d = to_double(wte), wpe_d = to_double(wpe);
  ref::embedding_forward(ref_out.data(), tokens.data(), wte_d.data(), wpe_d.data(), s.B, s.T, s.C);
  EXPECT_CLOSE(out, ref_out);
}

TEST_P(CpuKernelsMatchTheReference, EmbeddingBackwardAddsIntoPrefilledGradients) {
  const Shape s = GetParam();
  // A small token range so that tokens repeat and their rows accumulate.
  const auto tokens = random_tokens(s.N(), std::min(s.V, 7), 4);
  const Floats dout = random_floats(int64_t{s.N()} * s.C, 5);
  Grad dwte(int64_t{s.V} * s.C, 6), dwpe(int64_t{s.T} * s.C, 7);
  auto backward = [&](Floats& gwte, Floats& gwpe) {
    cpu::embedding_backward(gwte.data(), gwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C);
  };
  backward(dwte.zero, dwpe.zero);
  backward(dwte.filled, dwpe.filled);
  Doubles ref_dwte = dwte.ref(), ref_dwpe = dwpe.ref();
  const Doubles dout_d = to_double(dout);
  ref::embedding_backward(ref_dwte.data(), ref_dwpe.data(), dout_d.data(), tokens.data(), s.B, s.T,
                          s.C);
  EXPECT_CLOSE(dwte.zero, ref_dwte);
  EXPECT_CLOSE(dwpe.zero, ref_dwpe);
  EXPECT_ADDED(dwte);
  EXPECT_ADDED(dwpe);
}

TEST_P(CpuKernelsMatchTheReference, EmbeddingWithoutAPositionTable) {
  const Shape s = GetParam();
  const auto tokens = random_tokens(s.N(), std::min(s.V, 7), 90);
  const Floats wte = random_floats(int64_t{s.V} * s.C, 91);
  const Floats dout = random_floats(int64_t{s.N()} * s.C, 92);
  Floats out(static_cast<size_t>(s.N()) * s.C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, s.B, s.T, s.C);
  for (int n = 0; n < s.N(); ++n) {
    ASSERT_TRUE(std::equal(out.begin() + int64_t{n} * s.C, out.begin() + int64_t{n + 1} * s.C,
                           wte.begin() + int64_t{tokens[n]} * s.C))
        << "row " << n << " is not its token's row";
  }
  Grad dwte(int64_t{s.V} * s.C, 93);
  cpu::embedding_backward(dwte.zero.data(), nullptr, dout.data(), tokens.data(), s.B, s.T, s.C);
  cpu::embedding_backward(dwte.filled.data(), nullptr, dout.data(), tokens.data(), s.B, s.T, s.C);
  Doubles ref_dwte = dwte.ref();
  const Doubles dout_d = to_double(dout);
  ref::embedding_backward(ref_dwte.data(), nullptr, dout_d.data(), tokens.data(), s.B, s.T, s.C);
  EXPECT_CLOSE(dwte.zero, ref_dwte);
  EXPECT_ADDED(dwte);
}

// ---- layernorm -----------------------------------------------------------------------------

TEST_P(CpuKernelsMatchTheReference, LayerNormForward) {
  const Shape s = GetParam();
  const int N = s.N(), C = s.C;
  // An offset and scale so that the mean and variance matter.
  const Floats inp = random_floats(int64_t{N} * C, 8, 0.5f, 3.f);
  const Floats weight = random_floats(C, 9);
  const Floats bias = random_floats(C, 10);
  Floats out(inp.size()), mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         bias.data(), N, C);
  Doubles ref_out(out.size()), ref_mean(N), ref_rstd(N);
  const Doubles inp_d = to_double(inp), w_d = to_double(weight), b_d = to_double(bias);
  ref::layernorm_forward(ref_out.data(), ref_mean.data(), ref_rstd.data(), inp_d.data(), w_d.data(),
                         b_d.data(), N, C);
  EXPECT_CLOSE(out, ref_out);
  EXPECT_CLOSE(mean, ref_mean);
  EXPECT_CLOSE(rstd, ref_rstd);
  EXPECT_LT(max_abs_error(out, ref_out), 1e-5);
}

TEST_P(CpuKernelsMatchTheReference, LayerNormBackwardAddsIntoPrefilledGradients) {
  const Shape s = GetParam();
  const int N = s.N(), C = s.C;
  const Floats inp = random_floats(int64_t{N} * C, 11, -2.f, 1.f);
  const Floats weight = random_floats(C, 12);
  const Floats bias = random_floats(C, 13);
  const Floats dout = random_floats(int64_t{N} * C, 14);
  Floats out(inp.size()), mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         bias.data(), N, C);
  Grad dinp(int64_t{N} * C, 15), dweight(C, 16), dbias(C, 17);
  auto backward = [&](Floats& gi, Floats& gw, Floats& gb) {
    cpu::layernorm_backward(gi.data(), gw.data(), gb.data(), dout.data(), inp.data(), weight.data(),
                            mean.data(), rstd.data(), N, C);
  };
  backward(dinp.zero, dweight.zero, dbias.zero);
  backward(dinp.filled, dweight.filled, dbias.filled);
  // The reference recomputes mean and rstd in double from the same input.
  const Doubles inp_d = to_double(inp), w_d = to_double(weight), b_d = to_double(bias),
                dout_d = to_double(dout);
  Doubles ref_out(out.size()), ref_mean(N), ref_rstd(N);
  ref::layernorm_forward(ref_out.data(), ref_mean.data(), ref_rstd.data(), inp_d.data(), w_d.data(),
                         b_d.data(), N, C);
  Doubles ref_dinp = dinp.ref(), ref_dweight = dweight.ref(), ref_dbias = dbias.ref();
  ref::layernorm_backward(ref_dinp.data(), ref_dweight.data(), ref_dbias.data(), dout_d.data(),
                          inp_d.data(), w_d.data(), ref_mean.data(), ref_rstd.data(), N, C);
  EXPECT_CLOSE(dinp.zero, ref_dinp);
  EXPECT_CLOSE(dweight.zero, ref_dweight);
  EXPECT_CLOSE(dbias.zero, ref_dbias);
  EXPECT_ADDED(dinp);
  EXPECT_ADDED(dweight);
  EXPECT_ADDED(dbias);
}

// LayerNorm with another epsilon and no bias (dbias null), and RMSNorm (mean and bias null), the
// other normalizations of issue 39, against the reference in double; the backward adds as
// LayerNorm's does.
TEST_P(CpuKernelsMatchTheReference, LayerNormWithoutBiasAndRmsNormForwardAndBackward) {
  const Shape s = GetParam();
  const int N = s.N(), C = s.C;
  const Floats inp = random_floats(int64_t{N} * C, 94, -0.5f, 1.5f);  // not centred
  const Floats weight = random_floats(C, 95, 0.5f, 1.5f);
  const Floats dout = random_floats(int64_t{N} * C, 96);
  const Doubles inp_d = to_double(inp), w_d = to_double(weight), dout_d = to_double(dout);
  for (const Norm norm : {Norm{.rms = false, .eps = 1e-3f}, Norm{.rms = true, .eps = 1e-6f},
                          Norm{.rms = true, .eps = 0.5f}}) {
    SCOPED_TRACE(std::string(norm.rms ? "RMSNorm" : "LayerNorm without bias") +
                 " eps=" + std::to_string(norm.eps));
    Floats out(inp.size()), mean(N, 7.f), rstd(N);
    float* mean_p = norm.rms ? nullptr : mean.data();
    cpu::layernorm_forward(out.data(), mean_p, rstd.data(), inp.data(), weight.data(), nullptr, N,
                           C, norm);
    Doubles ref_out(out.size()), ref_mean(N), ref_rstd(N);
    double* ref_mean_p = norm.rms ? nullptr : ref_mean.data();
    ref::layernorm_forward(ref_out.data(), ref_mean_p, ref_rstd.data(), inp_d.data(), w_d.data(),
                           nullptr, N, C, norm);
    EXPECT_CLOSE(out, ref_out);
    EXPECT_CLOSE(rstd, ref_rstd);
    if (!norm.rms) {
      EXPECT_CLOSE(mean, ref_mean);
    } else {
      EXPECT_EQ(mean, Floats(N, 7.f)) << "RMSNorm wrote a mean";
    }

    Grad dinp(int64_t{N} * C, 97), dweight(C, 98);
    auto backward = [&](Floats& gi, Floats& gw) {
      cpu::layernorm_backward(gi.data(), gw.data(), nullptr, dout.data(), inp.data(), weight.data(),
                              mean_p, rstd.data(), N, C, norm);
    };
    backward(dinp.zero, dweight.zero);
    backward(dinp.filled, dweight.filled);
    Doubles ref_dinp = dinp.ref(), ref_dweight = dweight.ref();
    ref::layernorm_backward(ref_dinp.data(), ref_dweight.data(), nullptr, dout_d.data(),
                            inp_d.data(), w_d.data(), ref_mean_p, ref_rstd.data(), N, C, norm);
    EXPECT_CLOSE(dinp.zero, ref_dinp);
    EXPECT_CLOSE(dweight.zero, ref_dweight);
    EXPECT_ADDED(dinp);
    EXPECT_ADDED(dweight);
  }
}

// ---- linear --------------------------------------------------------------------------------

struct LinearShape {
  int N, IC, OC;
};
LinearShape linear_shape(const Shape& s) {
  return s.name == "Odd" ? LinearShape{51, 37, 45} : LinearShape{s.N(), s.C, 3 * s.C};
}

TEST_P(CpuKernelsMatchTheReference, MatmulForwardWithAndWithoutBias) {
  const auto [N, IC, OC] = linear_shape(GetParam());
  const Floats inp = random_floats(int64_t{N} * IC, 18);
  const Floats weight = random_floats(int64_t{OC} * IC, 19);
  const Floats bias = random_floats(OC, 20);
  const Doubles inp_d = to_double(inp), w_d = to_double(weight), b_d = to_double(bias);
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    Floats out = random_floats(int64_t{N} * OC, 21);  // garbage that must be overwritten
    cpu::matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N,
                        IC, OC);
    Doubles ref_out(out.size());
    ref::matmul_forward(ref_out.data(), inp_d.data(), w_d.data(), with_bias ? b_d.data() : nullptr,
                        N, IC, OC);
    EXPECT_CLOSE(out, ref_out);
  }
}

TEST_P(CpuKernelsMatchTheReference, MatmulBackwardWritesDinpAndAddsIntoParameterGradients) {
  const auto [N, IC, OC] = linear_shape(GetParam());
  const Floats inp = random_floats(int64_t{N} * IC, 22);
  const Floats weight = random_floats(int64_t{OC} * IC, 23);
  const Floats dout = random_floats(int64_t{N} * OC, 24);
  const Doubles inp_d = to_double(inp), w_d = to_double(weight), dout_d = to_double(dout);
  for (const bool with_dinp : {true, false}) {
    SCOPED_TRACE(with_dinp ? "with dinp and dbias" : "without dinp and dbias");
    Grad dinp = Grad::written(int64_t{N} * IC), dweight(int64_t{OC} * IC, 26), dbias(OC, 27);
    auto backward = [&](Floats& gi, Floats& gw, Floats& gb) {
      cpu::matmul_backward(with_dinp ? gi.data() : nullptr, gw.data(),
                           with_dinp ? gb.data() : nullptr, dout.data(), inp.data(), weight.data(),
                           N, IC, OC);
    };
    backward(dinp.zero, dweight.zero, dbias.zero);
    backward(dinp.filled, dweight.filled, dbias.filled);
    Doubles ref_dinp = dinp.ref(), ref_dweight = dweight.ref(), ref_dbias = dbias.ref();
    ref::matmul_backward(with_dinp ? ref_dinp.data() : nullptr, ref_dweight.data(),
                         with_dinp ? ref_dbias.data() : nullptr, dout_d.data(), inp_d.data(),
                         w_d.data(), N, IC, OC);
    EXPECT_CLOSE(dinp.zero, ref_dinp);
    EXPECT_CLOSE(dweight.zero, ref_dweight);
    EXPECT_CLOSE(dbias.zero, ref_dbias);
    if (with_dinp) {
      EXPECT_WRITTEN(dinp);
    } else {
      EXPECT_TRUE(bit_identical(dinp.filled, dinp.prefill)) << "a null dinp was written";
    }
    EXPECT_ADDED(dweight);
    EXPECT_ADDED(dbias);
  }
}

// ---- attention -----------------------------------------------------------------------------

// The key/value head counts tried at NH query heads: NH (multi-head), 1 (multi-query) and 2
// (grouped) where they divide NH.
std::vector<int> kv_head_counts(int NH) {
  std::vector<int> out = {NH, 1};
  if (NH % 2 == 0 && NH != 2) out.push_back(2);
  return out;
}
// qkv's row width under grouped-query attention: q (C) then k and v (NKV heads each).
int64_t qkv_width(const Shape& s, int NKV) { return s.C + 2 * int64_t{NKV} * (s.C / s.NH); }

TEST_P(CpuKernelsMatchTheReference, AttentionForwardWritesZerosAboveTheDiagonal) {
  const Shape s = GetParam();
  const int B = s.B, T = s.T, C = s.C, NH = s.NH;
  for (const int NKV : kv_head_counts(NH)) {
    SCOPED_TRACE("NKV=" + std::to_string(NKV));
    const Floats qkv = random_floats(int64_t{B} * T * qkv_width(s, NKV), 28, -2.f, 2.f);
    Floats out(static_cast<size_t>(B) * T * C);
    Floats att = random_floats(int64_t{B} * NH * T * T, 29);  // garbage that must be overwritten
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
    Doubles ref_out(out.size()), ref_att(att.size());
    const Doubles qkv_d = to_double(qkv);
    ref::attention_forward(ref_out.data(), ref_att.data(), qkv_d.data(), B, T, C, NH, NKV);
    EXPECT_CLOSE(out, ref_out);
    EXPECT_CLOSE(att, ref_att);
    EXPECT_LT(max_abs_error(att, ref_att), 1e-6);
    int64_t nonzero_masked = 0;
    for (int64_t bh = 0; bh < int64_t{B} * NH; ++bh) {
      for (int t = 0; t < T; ++t) {
        for (int j = t + 1; j < T; ++j) nonzero_masked += att[(bh * T + t) * T + j] != 0.f;
      }
    }
    EXPECT_EQ(nonzero_masked, 0);
  }
}

TEST_P(CpuKernelsMatchTheReference, AttentionBackwardWritesItsGradient) {
  const Shape s = GetParam();
  const int B = s.B, T = s.T, C = s.C, NH = s.NH;
  for (const int NKV : kv_head_counts(NH)) {
    SCOPED_TRACE("NKV=" + std::to_string(NKV));
    const Floats qkv = random_floats(int64_t{B} * T * qkv_width(s, NKV), 30, -2.f, 2.f);
    const Floats dout = random_floats(int64_t{B} * T * C, 31);
    Floats out(dout.size()), att(static_cast<size_t>(B) * NH * T * T);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
    Grad dqkv = Grad::written(static_cast<int64_t>(qkv.size()));
    cpu::attention_backward(dqkv.zero.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH,
                            NKV);
    cpu::attention_backward(dqkv.filled.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH,
                            NKV);
    const Doubles qkv_d = to_double(qkv), dout_d = to_double(dout);
    Doubles ref_out(out.size()), ref_att(att.size()), ref_dqkv = dqkv.ref();
    ref::attention_forward(ref_out.data(), ref_att.data(), qkv_d.data(), B, T, C, NH, NKV);
    ref::attention_backward(ref_dqkv.data(), dout_d.data(), qkv_d.data(), ref_att.data(), B, T, C,
                            NH, NKV);
    EXPECT_CLOSE(dqkv.zero, ref_dqkv);
    EXPECT_WRITTEN(dqkv);
  }
}

// ---- rotary position embedding -------------------------------------------------------------

// In place on the q and k heads of rows [B,T,(NH+2*NKV)*HS]: against the reference (double
// angles, cos and sin not rounded), v untouched bit for bit; the inverse undoes it; and the
// inverse applied to a gradient is the reference's backward (the gradient rule of an in-place op).
TEST_P(CpuKernelsMatchTheReference, RopeRotatesQAndKAndItsInverseIsTheBackward) {
  const Shape s = GetParam();
  const int B = s.B, T = s.T, NH = s.NH, HS = s.C / s.NH;
  for (const int NKV : kv_head_counts(NH)) {
    // GPT-NeoX's and Llama 2's theta with all heads, Llama 3's with fewer key/value heads.
    const float theta = NKV == NH ? 10000.f : 500000.f;
    SCOPED_TRACE("NKV=" + std::to_string(NKV) + " theta=" + std::to_string(theta));
    const int64_t W = qkv_width(s, NKV), size = int64_t{B} * T * W;
    const Floats x = random_floats(size, 99, -2.f, 2.f);
    Floats y = x;
    cpu::rope(y.data(), B, T, NH, NKV, HS, theta, false);
    Doubles ref_y = to_double(x);
    ref::rope(ref_y.data(), B, T, NH, NKV, HS, double{theta}, false);
    EXPECT_CLOSE(y, ref_y);
    EXPECT_LT(max_abs_error(y, ref_y), 1e-5);  // |x| < 2: a few float ulps
    for (int64_t n = 0; n < int64_t{B} * T; ++n) {
      const int64_t v0 = n * W + int64_t{NH + NKV} * HS;
      ASSERT_TRUE(std::equal(y.begin() + v0, y.begin() + (n + 1) * W, x.begin() + v0))
          << "row " << n << ": v was rotated";
    }
    Floats back = y;
    cpu::rope(back.data(), B, T, NH, NKV, HS, theta, true);
    EXPECT_LT(max_abs_error(back, to_double(x)), 1e-5);
    const Floats dy = random_floats(size, 100);
    Floats dx = dy;
    cpu::rope(dx.data(), B, T, NH, NKV, HS, theta, true);
    Doubles ref_dx = to_double(dy);
    ref::rope(ref_dx.data(), B, T, NH, NKV, HS, double{theta}, true);
    EXPECT_CLOSE(dx, ref_dx);
  }
}

// ---- SwiGLU --------------------------------------------------------------------------------

TEST_P(CpuKernelsMatchTheReference, SwigluForwardAndBackwardWritesItsGradient) {
  const Shape s = GetParam();
  const int N = s.N(), F = s.name == "Odd" ? 45 : 4 * s.C;  // odd; and a GPT's 4C
  const Floats inp = random_floats(int64_t{N} * 2 * F, 101, -8.f, 8.f);
  const Floats dout = random_floats(int64_t{N} * F, 102);
  const Doubles inp_d = to_double(inp), dout_d = to_double(dout);
  Floats out = random_floats(int64_t{N} * F, 103);  // garbage that must be overwritten
  cpu::swiglu_forward(out.data(), inp.data(), N, F);
  Doubles ref_out(out.size());
  ref::swiglu_forward(ref_out.data(), inp_d.data(), N, F);
  EXPECT_CLOSE(out, ref_out);
  Grad dinp = Grad::written(int64_t{N} * 2 * F);
  cpu::swiglu_backward(dinp.zero.data(), dout.data(), inp.data(), N, F);
  cpu::swiglu_backward(dinp.filled.data(), dout.data(), inp.data(), N, F);
  Doubles ref_dinp = dinp.ref();
  ref::swiglu_backward(ref_dinp.data(), dout_d.data(), inp_d.data(), N, F);
  EXPECT_CLOSE(dinp.zero, ref_dinp);
  EXPECT_WRITTEN(dinp);
}

// ---- elementwise ---------------------------------------------------------------------------

// Sizes for the elementwise ops: below and above the size where they go parallel.
int64_t elementwise_n(const Shape& s) { return s.name == "Odd" ? 1001 : 4 * s.N() * s.C + 7; }

TEST_P(CpuKernelsMatchTheReference, GeluForward) {
  const int64_t n = elementwise_n(GetParam());
  const Floats inp = random_floats(n, 33, -12.f, 12.f);  // into the tails of exp(-2u)
  Floats out(inp.size());
  cpu::gelu_forward(out.data(), inp.data(), n);
  Doubles ref_out(out.size());
  const Doubles inp_d = to_double(inp);
  ref::gelu_forward(ref_out.data(), inp_d.data(), n);
  EXPECT_CLOSE(out, ref_out);
  EXPECT_LT(max_abs_error(out, ref_out), 1e-5);
}

TEST_P(CpuKernelsMatchTheReference, GeluBackwardWritesItsGradientAlsoInPlace) {
  const int64_t n = elementwise_n(GetParam());
  const Floats inp = random_floats(n, 34, -12.f, 12.f);
  const Floats dout = random_floats(n, 35);
  Grad dinp = Grad::written(n);
  cpu::gelu_backward(dinp.zero.data(), inp.data(), dout.data(), n);
  cpu::gelu_backward(dinp.filled.data(), inp.data(), dout.data(), n);
  Doubles ref_dinp = dinp.ref();
  const Doubles inp_d = to_double(inp), dout_d = to_double(dout);
  ref::gelu_backward(ref_dinp.data(), inp_d.data(), dout_d.data(), n);
  EXPECT_CLOSE(dinp.zero, ref_dinp);
  EXPECT_LT(max_abs_error(dinp.zero, ref_dinp), 1e-5);
  EXPECT_WRITTEN(dinp);
  // In place: the gradient overwrites dout.
  Floats in_place = dout;
  cpu::gelu_backward(in_place.data(), inp.data(), in_place.data(), n);
  EXPECT_TRUE(bit_identical(in_place, dinp.zero));
}

TEST_P(CpuKernelsMatchTheReference, ResidualForward) {
  const int64_t n = elementwise_n(GetParam());
  const Floats a = random_floats(n, 37), b = random_floats(n, 38);
  Floats out(a.size());
  cpu::residual_forward(out.data(), a.data(), b.data(), n);
  const Doubles a_d = to_double(a), b_d = to_double(b);
  Doubles ref_out(out.size());
  ref::residual_forward(ref_out.data(), a_d.data(), b_d.data(), n);
  // Single additions: exact up to one rounding.
  EXPECT_LT(max_abs_error(out, ref_out), 1e-6);
}

// ---- softmax + cross-entropy ---------------------------------------------------------------

// Targets with every third row ignored (-1).
std::vector<int32_t> targets_with_ignored(int N, int V, uint32_t seed) {
  auto targets = random_tokens(N, V, seed);
  for (int n = 0; n < N; n += 3) targets[n] = -1;
  return targets;
}

// Logits with a spread like a trained model's, and padding columns holding garbage (never NaN
// or inf: the kernels are built with -ffast-math) that must not take part.
Floats random_logits(const Shape& s, uint32_t seed) {
  Floats logits = random_floats(int64_t{s.N()} * s.Vp, seed, -8.f, 8.f);
  for (int n = 0; n < s.N(); ++n) {
    for (int j = s.V; j < s.Vp; ++j) logits[int64_t{n} * s.Vp + j] = 1000.f;
  }
  return logits;
}

TEST_P(CpuKernelsMatchTheReference, SoftmaxCrossEntropyFusedWritesExactZerosInPaddingColumns) {
  const Shape s = GetParam();
  const auto targets = targets_with_ignored(s.N(), s.V, 44);
  Floats logits = random_logits(s, 45);
  Doubles ref_logits = to_double(logits);
  const float dloss = 1.f / static_cast<float>(s.N());
  Floats losses(s.N(), -1.f);
  cpu::softmax_cross_entropy_fused(losses.data(), logits.data(), targets.data(), dloss, s.N(), s.V,
                                   s.Vp);
  Doubles ref_losses(losses.size());
  ref::softmax_cross_entropy_fused(ref_losses.data(), ref_logits.data(), targets.data(),
                                   static_cast<double>(dloss), s.N(), s.V, s.Vp);
  EXPECT_CLOSE(losses, ref_losses);
  EXPECT_CLOSE(logits, ref_logits);
  int64_t nonzero_padding = 0;
  int64_t nonzero_ignored = 0;
  for (int n = 0; n < s.N(); ++n) {
    const float* row = logits.data() + int64_t{n} * s.Vp;
    for (int j = s.V; j < s.Vp; ++j) nonzero_padding += row[j] != 0.f;
    if (targets[n] < 0) {
      EXPECT_EQ(losses[n], 0.f) << "ignored row " << n;
      for (int j = 0; j < s.Vp; ++j) nonzero_ignored += row[j] != 0.f;
    }
  }
  EXPECT_EQ(nonzero_padding, 0);
  EXPECT_EQ(nonzero_ignored, 0);
}

// ---- optimizer -----------------------------------------------------------------------------

TEST_P(CpuKernelsMatchTheReference, AdamwUpdate) {
  const int64_t n = elementwise_n(GetParam());
  Floats params = random_floats(n, 46);
  const Floats grads = random_floats(n, 47, -0.1f, 0.1f);
  Floats m = random_floats(n, 48, -0.05f, 0.05f);
  Floats v = random_floats(n, 49, 0.f, 0.01f);
  Doubles ref_params = to_double(params), ref_m = to_double(m), ref_v = to_double(v);
  const Doubles grads_d = to_double(grads);
  for (int t = 1; t <= 3; ++t) {
    cpu::adamw_update(params.data(), grads.data(), m.data(), v.data(), n, 6e-4f, 0.9f, 0.95f, 1e-8f,
                      0.1f, t);
    ref::adamw_update(ref_params.data(), grads_d.data(), ref_m.data(), ref_v.data(), n,
                      double{6e-4f}, double{0.9f}, double{0.95f}, double{1e-8f}, double{0.1f}, t);
  }
  EXPECT_CLOSE(params, ref_params);
  EXPECT_CLOSE(m, ref_m);
  EXPECT_CLOSE(v, ref_v);
  EXPECT_LT(max_abs_error(params, ref_params), 1e-6);
}

TEST_P(CpuKernelsMatchTheReference, SumSquares) {
  const int64_t n = elementwise_n(GetParam()) * 3;  // several sum_squares chunks at medium size
  Floats x = random_floats(n, 50);
  const Doubles x_d = to_double(x);
  const double ss = cpu::sum_squares(x.data(), n);
  const double ref_ss = ref::sum_squares(x_d.data(), n);
  EXPECT_NEAR(ss, ref_ss, 1e-12 * ref_ss);
}

INSTANTIATE_TEST_SUITE_P(Sizes, CpuKernelsMatchTheReference, ::testing::Values(kOdd, kMedium),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return info.param.name;
                         });

// ---- sgemm ---------------------------------------------------------------------------------

// C[M,N] = alpha op(A) op(B) + beta C with row-major leading dimensions, in double.

TEST(Sgemm, MatchesANaiveLoopForAllFourTransposeCombinations) {
  const int M = 37, N = 29, K = 53;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a=") + (ta ? "T" : "N") + " trans_b=" + (tb ? "T" : "N"));
      // Leading dimensions larger than the row length, as for strided q/k/v views.
      const int lda = (ta ? M : K) + 5;
      const int ldb = (tb ? K : N) + 3;
      const int ldc = N + 7;
      const Floats A = random_floats(int64_t{ta ? K : M} * lda, 51);
      const Floats B = random_floats(int64_t{tb ? N : K} * ldb, 52);
      Floats C = random_floats(int64_t{M} * ldc, 53);
      Doubles ref_C = to_double(C);
      sgemm(ta, tb, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, 0.5f, C.data(), ldc);
      reference_gemm(ta, tb, M, N, K, 0.75, A, lda, B, ldb, 0.5, ref_C, ldc);
      EXPECT_CLOSE(C, ref_C);
    }
  }
}

// Large enough that sgemm splits C across threads: along the rows (tall C) or the columns (wide C).
TEST(Sgemm, SplitAcrossThreadsMatchesANaiveLoopForTallAndWideOutputs) {
  struct Size {
    int M, N, K;
  };
  for (const Size sz : {Size{301, 263, 131}, Size{141, 307, 197}}) {
    const int M = sz.M, N = sz.N, K = sz.K;
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) +
                     " trans_a=" + (ta ? "T" : "N") + " trans_b=" + (tb ? "T" : "N"));
        const int lda = (ta ? M : K) + 3;
        const int ldb = (tb ? K : N) + 1;
        const int ldc = N + 5;
        const Floats A = random_floats(int64_t{ta ? K : M} * lda, 56);
        const Floats B = random_floats(int64_t{tb ? N : K} * ldb, 57);
        Floats C = random_floats(int64_t{M} * ldc, 58);
        Doubles ref_C = to_double(C);
        sgemm(ta, tb, M, N, K, -1.25f, A.data(), lda, B.data(), ldb, 1.f, C.data(), ldc);
        reference_gemm(ta, tb, M, N, K, -1.25, A, lda, B, ldb, 1.0, ref_C, ldc);
        EXPECT_CLOSE(C, ref_C);
      }
    }
  }
}

TEST(Sgemm, WithBetaZeroOverwritesTheOutput) {
  const int M = 17, N = 19, K = 23;
  const Floats A = random_floats(int64_t{M} * K, 54);
  const Floats B = random_floats(int64_t{K} * N, 55);
  Floats C(static_cast<size_t>(M) * N, 1e30f);
  Doubles ref_C(C.size(), 0.0);
  sgemm(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C.data(), N);
  reference_gemm(false, false, M, N, K, 1.0, A, K, B, N, 0.0, ref_C, N);
  EXPECT_CLOSE(C, ref_C);
}

TEST(Sgemm, WithAnEmptyInnerDimensionScalesTheOutputByBeta) {
  Floats C = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  const Floats A = {0.f}, B = {0.f};
  sgemm(false, false, 2, 3, 0, 1.f, A.data(), 1, B.data(), 3, 0.5f, C.data(), 3);
  EXPECT_EQ(C, (Floats{0.5f, 1.f, 1.5f, 2.f, 2.5f, 3.f}));
  sgemm(true, true, 2, 3, 0, 1.f, A.data(), 2, B.data(), 1, 0.f, C.data(), 3);
  EXPECT_EQ(C, Floats(6, 0.f));
}

// ---- determinism ---------------------------------------------------------------------------

// Runs `fn` (which fills its outputs from fixed inputs) twice and demands bit-identical outputs.
// Recomputation on/off must give identical gradients, so every kernel must be deterministic.
class CpuKernelsAreDeterministic : public ::testing::Test {
 protected:
  const Shape s = kMedium;
};

TEST_F(CpuKernelsAreDeterministic, BackwardKernelsGiveBitIdenticalGradientsOnTwoRuns) {
  const int B = s.B, T = s.T, C = s.C, NH = s.NH, N = s.N();
  const Floats qkv = random_floats(int64_t{B} * T * 3 * C, 60, -2.f, 2.f);
  const Floats dout = random_floats(int64_t{N} * C, 61);
  const Floats inp = random_floats(int64_t{N} * C, 62);
  const Floats weight = random_floats(int64_t{3 * C} * C, 63);
  const Floats dout3 = random_floats(int64_t{N} * 3 * C, 64);
  const auto tokens = random_tokens(N, 11, 65);
  Floats out(dout.size()), att(static_cast<size_t>(B) * NH * T * T);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NH);
  // Grouped-query: 2 key/value heads, each summing the gradients of NH / 2 query heads.
  const Floats gqa = random_floats(int64_t{N} * (C + 4 * (C / NH)), 86, -2.f, 2.f);
  Floats gqa_att(att.size());
  cpu::attention_forward(out.data(), gqa_att.data(), gqa.data(), B, T, C, NH, 2);
  Floats mean(N), rstd(N), rms_rstd(N), ln_out(inp.size());
  cpu::layernorm_forward(ln_out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         weight.data() + C, N, C);
  const Norm rms{.rms = true};
  cpu::layernorm_forward(ln_out.data(), nullptr, rms_rstd.data(), inp.data(), weight.data(),
                         nullptr, N, C, rms);

  auto run = [&] {
    std::vector<Floats> grads;
    Floats dqkv(qkv.size(), 0.f);
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, NH);
    grads.push_back(dqkv);
    Floats dgqa(gqa.size(), 0.f);
    cpu::attention_backward(dgqa.data(), dout.data(), gqa.data(), gqa_att.data(), B, T, C, NH, 2);
    grads.push_back(dgqa);
    Floats rms_dinp(inp.size(), 0.f), rms_dw(C, 0.f);
    cpu::layernorm_backward(rms_dinp.data(), rms_dw.data(), nullptr, dout.data(), inp.data(),
                            weight.data(), nullptr, rms_rstd.data(), N, C, rms);
    grads.insert(grads.end(), {rms_dinp, rms_dw});
    Floats dswiglu(inp.size(), 0.f);  // [N, 2F] with F = C / 2 (dout's first N F elements)
    cpu::swiglu_backward(dswiglu.data(), dout.data(), inp.data(), N, C / 2);
    grads.push_back(dswiglu);
    Floats dinp(inp.size(), 0.f), dw(C, 0.f), db(C, 0.f);
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                            weight.data(), mean.data(), rstd.data(), N, C);
    grads.insert(grads.end(), {dinp, dw, db});
    Floats mdinp(inp.size(), 0.f), mdw(weight.size(), 0.f), mdb(3 * C, 0.f);
    cpu::matmul_backward(mdinp.data(), mdw.data(), mdb.data(), dout3.data(), inp.data(),
                         weight.data(), N, C, 3 * C);
    grads.insert(grads.end(), {mdinp, mdw, mdb});
    Floats dwte(static_cast<size_t>(11) * C, 0.f), dwpe(static_cast<size_t>(T) * C, 0.f);
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    grads.insert(grads.end(), {dwte, dwpe});
    Floats gelu_d(inp.size(), 0.f);
    cpu::gelu_backward(gelu_d.data(), inp.data(), dout.data(), static_cast<int64_t>(inp.size()));
    grads.push_back(gelu_d);
    return grads;
  };
  const auto first = run();
  const auto second = run();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(bit_identical(first[i], second[i])) << i;
}

TEST_F(CpuKernelsAreDeterministic, LossOptimizerAndNormGiveBitIdenticalResultsOnTwoRuns) {
  const auto targets = targets_with_ignored(s.N(), s.V, 66);
  const Floats logits = random_logits(s, 67);
  const int64_t n = 3 * elementwise_n(s);
  const Floats grads = random_floats(n, 68);
  auto run = [&] {
    std::vector<Floats> results;
    Floats z = logits;
    Floats losses(s.N());
    cpu::softmax_cross_entropy_fused(losses.data(), z.data(), targets.data(), 0.5f, s.N(), s.V,
                                     s.Vp);
    results.insert(results.end(), {z, losses});
    Floats p = random_floats(n, 69), m(n, 0.f), v(n, 0.f);
    cpu::adamw_update(p.data(), grads.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                      0.01f, 1);
    results.insert(results.end(), {p, m, v});
    results.push_back(bits_of(cpu::sum_squares(grads.data(), n)));
    return results;
  };
  const auto first = run();
  const auto second = run();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(bit_identical(first[i], second[i])) << i;
}

// The kernels that reduce across rows with fixed chunks or give each thread whole columns do not
// depend on the thread count at all.
TEST_F(CpuKernelsAreDeterministic, RowReductionsDoNotDependOnTheThreadCount) {
  const int N = s.N(), C = s.C, T = s.T;
  const Floats inp = random_floats(int64_t{N} * C, 70);
  const Floats weight = random_floats(C, 71);
  const Floats dout = random_floats(int64_t{N} * C, 72);
  const auto tokens = random_tokens(N, 5, 73);
  Floats mean(N), rstd(N), out(inp.size());
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         weight.data(), N, C);
  auto run = [&] {
    std::vector<Floats> results;
    Floats dinp(inp.size(), 0.f), dw(C, 0.f), db(C, 0.f);
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                            weight.data(), mean.data(), rstd.data(), N, C);
    results.insert(results.end(), {dinp, dw, db});
    Floats dwte(static_cast<size_t>(5) * C, 0.f), dwpe(static_cast<size_t>(T) * C, 0.f);
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, T, C);
    results.insert(results.end(), {dwte, dwpe});
    results.push_back(bits_of(cpu::sum_squares(dout.data(), int64_t{N} * C)));
    return results;
  };
  const int saved = num_threads();
  set_num_threads(1);
  const auto one = run();
  set_num_threads(2);
  const auto two = run();
  set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bit_identical(one[i], two[i])) << i;
}

// Recomputed activations may live at other addresses than the originals; the results must not
// depend on where the buffers are (no alignment-dependent peeling in reductions, no
// alignment-dependent GEMM paths). Every buffer is placed 64-byte aligned and then 1, 2, 3 and 5
// floats off, and the outputs compared bit for bit.
TEST_F(CpuKernelsAreDeterministic, ResultsDoNotDependOnBufferAlignment) {
  const int B = s.B, T = s.T, C = s.C, NH = s.NH, N = s.N(), V = s.V, Vp = s.Vp;
  const Floats qkv = random_floats(int64_t{B} * T * 3 * C, 80, -2.f, 2.f);
  const Floats inp = random_floats(int64_t{N} * C, 81);
  const Floats weight = random_floats(int64_t{3 * C} * C, 82);
  const Floats dout = random_floats(int64_t{N} * 3 * C, 83);
  const Floats logits = random_logits(s, 84);
  const auto targets = targets_with_ignored(N, V, 85);

  auto run = [&](int offset) {
    // A copy of `x` starting `offset` floats after a 64-byte boundary (kept alive in `store`).
    std::vector<Floats> store;
    auto place = [&](const Floats& x) {
      store.emplace_back(x.size() + 32, 0.f);
      float* base = store.back().data();
      base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64 / sizeof(float);
      std::copy(x.begin(), x.end(), base + offset);
      return base + offset;
    };
    auto zeros = [&](size_t n) { return place(Floats(n, 0.f)); };
    auto take = [](const float* p, size_t n) { return Floats(p, p + n); };
    std::vector<Floats> results;

    const size_t nc = inp.size(), n3c = qkv.size(), natt = static_cast<size_t>(B) * NH * T * T;
    float *q = place(qkv), *x = place(inp), *w = place(weight), *dy = place(dout);
    float *out = zeros(nc), *att = zeros(natt), *dq = zeros(n3c);
    cpu::attention_forward(out, att, q, B, T, C, NH, NH);
    cpu::attention_backward(dq, dy, q, att, B, T, C, NH, NH);
    results.insert(results.end(), {take(out, nc), take(att, natt), take(dq, n3c)});

    float *ln = zeros(nc), *mean = zeros(N), *rstd = zeros(N);
    float *dx = zeros(nc), *dw = zeros(C), *db = zeros(C);
    cpu::layernorm_forward(ln, mean, rstd, x, w, w + C, N, C);
    cpu::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C);
    results.insert(results.end(), {take(ln, nc), take(mean, N), take(rstd, N), take(dx, nc),
                                   take(dw, C), take(db, C)});

    float *y = zeros(n3c), *mdx = zeros(nc), *mdw = zeros(weight.size()), *mdb = zeros(3 * C);
    cpu::matmul_forward(y, x, w, w, N, C, 3 * C);
    cpu::matmul_backward(mdx, mdw, mdb, dy, x, w, N, C, 3 * C);
    results.insert(results.end(),
                   {take(y, n3c), take(mdx, nc), take(mdw, weight.size()), take(mdb, 3 * C)});

    float *g = zeros(nc), *dg = zeros(nc);
    cpu::gelu_forward(g, x, static_cast<int64_t>(nc));
    cpu::gelu_backward(dg, x, dy, static_cast<int64_t>(nc));
    results.insert(results.end(), {take(g, nc), take(dg, nc)});

    float *z = place(logits), *losses = zeros(N);
    cpu::softmax_cross_entropy_fused(losses, z, targets.data(), 0.25f, N, V, Vp);
    results.insert(results.end(), {take(z, logits.size()), take(losses, N)});
    results.push_back(bits_of(cpu::sum_squares(dy, static_cast<int64_t>(dout.size()))));
    return results;
  };
  const auto aligned = run(0);
  for (const int offset : {1, 2, 3, 5}) {
    const auto shifted = run(offset);
    ASSERT_EQ(aligned.size(), shifted.size());
    for (size_t i = 0; i < aligned.size(); ++i) {
      EXPECT_TRUE(bit_identical(aligned[i], shifted[i]))
          << "result " << i << " at offset " << offset;
    }
  }
}

TEST(KernelThreads, SetNumThreadsIsWhatNumThreadsReports) {
  const int saved = num_threads();
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(3);
  EXPECT_EQ(num_threads(), 3);
  set_num_threads(saved);
  EXPECT_EQ(num_threads(), saved);
}

}  // namespace
}  // namespace weft::kernels
