// Tests of the reference kernels (tests/support/kernel_reference.h), instantiated with T = double.
// The oracle for every backward kernel is central finite differences of its forward kernel:
// with a random upstream gradient dout and L(x) = sum(dout * forward(x)), the backward kernel's
// dL/dx (into zeroed buffers, so it does not matter whether the kernel writes or adds) must match
// (L(x + h) - L(x - h)) / 2h for every element of every input and parameter.

#include "support/kernel_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace weft::kernels {
namespace {

using Vec = std::vector<double>;

constexpr double kStep = 1e-6;  // finite-difference step h
constexpr double kTol = 1e-6;   // on max|a - b| / max(1, max|b|)

Vec random_vec(std::mt19937& gen, size_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double max_abs(const Vec& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

// max|a - b| / max(1, max|b|)
double relative_error(const Vec& analytic, const Vec& numeric) {
  double diff = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    diff = std::max(diff, std::abs(analytic[i] - numeric[i]));
  }
  return diff / std::max(1.0, max_abs(numeric));
}

// Central differences of `loss` with respect to every element of `x` (perturbed in place and
// restored afterwards).
Vec finite_differences(Vec& x, const std::function<double()>& loss) {
  Vec grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kStep;
    const double plus = loss();
    x[i] = saved - kStep;
    const double minus = loss();
    x[i] = saved;
    grad[i] = (plus - minus) / (2 * kStep);
  }
  return grad;
}

// Expects the analytic gradient with respect to `x` to match finite differences of `loss`, and
// the gradient to be non-trivial (so a kernel that writes nothing cannot pass).
void expect_gradient_matches(const std::string& name, Vec& x, const Vec& analytic,
                             const std::function<double()>& loss) {
  SCOPED_TRACE("gradient with respect to " + name);
  ASSERT_EQ(analytic.size(), x.size());
  const Vec numeric = finite_differences(x, loss);
  EXPECT_GT(max_abs(numeric), 1e-3) << "finite-difference gradient is ~0: the test is vacuous";
  EXPECT_LE(relative_error(analytic, numeric), kTol);
}

// ---- embedding -------------------------------------------------------------------------------

TEST(ReferenceEmbedding, ForwardAddsTokenRowAndPositionRow) {
  const int B = 2, T = 3, C = 4, V = 5;
  std::mt19937 gen(1);
  const Vec wte = random_vec(gen, V * C), wpe = random_vec(gen, T * C);
  const std::vector<int32_t> tokens = {4, 0, 4, 2, 1, 3};
  Vec out(B * T * C);
  ref::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int c = 0; c < C; ++c) {
        EXPECT_EQ(out[(b * T + t) * C + c], wte[tokens[b * T + t] * C + c] + wpe[t * C + c]);
      }
    }
  }
}

TEST(ReferenceEmbedding, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 3, C = 8, V = 7;
  std::mt19937 gen(2);
  Vec wte = random_vec(gen, V * C), wpe = random_vec(gen, T * C);
  const std::vector<int32_t> tokens = {3, 1, 3, 6, 3, 0};  // token 3 repeats: rows must add up
  const Vec dout = random_vec(gen, B * T * C);
  auto loss = [&] {
    Vec out(B * T * C);
    ref::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(dout, out);
  };
  Vec dwte(V * C, 0.0), dwpe(T * C, 0.0);
  ref::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  expect_gradient_matches("wte", wte, dwte, loss);
  expect_gradient_matches("wpe", wpe, dwpe, loss);
}

TEST(ReferenceEmbedding, WithoutAPositionTableIsTheTokenRowAndItsGradient) {
  const int B = 2, T = 3, C = 4, V = 5;
  std::mt19937 gen(21);
  Vec wte = random_vec(gen, V * C);
  const std::vector<int32_t> tokens = {4, 0, 4, 2, 1, 3};
  const Vec dout = random_vec(gen, B * T * C);
  auto loss = [&] {
    Vec out(B * T * C);
    ref::embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C);
    return dot(dout, out);
  };
  Vec out(B * T * C);
  ref::embedding_forward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C);
  for (int n = 0; n < B * T; ++n) {
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[n * C + c], wte[tokens[n] * C + c]);
  }
  Vec dwte(V * C, 0.0);
  ref::embedding_backward(dwte.data(), nullptr, dout.data(), tokens.data(), B, T, C);
  expect_gradient_matches("wte", wte, dwte, loss);
}

// ---- LayerNorm -------------------------------------------------------------------------------

TEST(ReferenceLayerNorm, ForwardGivesZeroMeanAndUnitVarianceWithIdentityAffine) {
  const int N = 5, C = 16;
  std::mt19937 gen(3);
  const Vec inp = random_vec(gen, N * C, -3.0, 5.0);
  const Vec weight(C, 1.0), bias(C, 0.0);
  Vec out(N * C), mean(N), rstd(N);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         bias.data(), N, C);
  for (int n = 0; n < N; ++n) {
    double m = 0, var = 0, in_mean = 0;
    for (int c = 0; c < C; ++c) {
      m += out[n * C + c];
      in_mean += inp[n * C + c];
    }
    m /= C;
    in_mean /= C;
    for (int c = 0; c < C; ++c) var += (out[n * C + c] - m) * (out[n * C + c] - m);
    var /= C;
    EXPECT_NEAR(m, 0.0, 1e-12) << "row " << n;
    // Unit variance up to the eps in 1/sqrt(var + eps).
    EXPECT_NEAR(var, 1.0, 1e-4) << "row " << n;
    EXPECT_NEAR(mean[n], in_mean, 1e-12) << "row " << n;
  }
}

TEST(ReferenceLayerNorm, BackwardMatchesFiniteDifferences) {
  const int N = 5, C = 8;
  std::mt19937 gen(4);
  Vec inp = random_vec(gen, N * C, -2.0, 2.0);
  Vec weight = random_vec(gen, C, 0.5, 1.5), bias = random_vec(gen, C);
  const Vec dout = random_vec(gen, N * C);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), N, C);
    return dot(dout, out);
  };
  loss();  // saves mean and rstd at the unperturbed point for the backward kernel
  const Vec saved_mean = mean, saved_rstd = rstd;
  Vec dinp(N * C, 0.0), dweight(C, 0.0), dbias(C, 0.0);
  ref::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                          weight.data(), saved_mean.data(), saved_rstd.data(), N, C);
  expect_gradient_matches("inp", inp, dinp, loss);
  expect_gradient_matches("weight", weight, dweight, loss);
  expect_gradient_matches("bias", bias, dbias, loss);
}

TEST(ReferenceLayerNorm, EpsilonEntersTheRstdAndANullBiasAddsNothing) {
  const int N = 3, C = 16;
  std::mt19937 gen(22);
  const Vec inp = random_vec(gen, N * C, -0.1, 0.1);  // a small variance: eps matters
  const Vec weight = random_vec(gen, C, 0.5, 1.5), bias = random_vec(gen, C);
  const Norm norm{.rms = false, .eps = 1e-2f};
  Vec with_bias(N * C), without(N * C), mean(N), rstd(N);
  ref::layernorm_forward(with_bias.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         bias.data(), N, C, norm);
  ref::layernorm_forward(without.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         nullptr, N, C, norm);
  for (int n = 0; n < N; ++n) {
    double m = 0, var = 0;
    for (int c = 0; c < C; ++c) m += inp[n * C + c] / C;
    for (int c = 0; c < C; ++c) var += (inp[n * C + c] - m) * (inp[n * C + c] - m) / C;
    EXPECT_NEAR(rstd[n], 1.0 / std::sqrt(var + static_cast<double>(norm.eps)), 1e-12);
    for (int c = 0; c < C; ++c) {
      EXPECT_NEAR(with_bias[n * C + c] - bias[c], without[n * C + c], 1e-15);
    }
  }
}

TEST(ReferenceLayerNorm, WithoutBiasBackwardMatchesFiniteDifferences) {
  const int N = 5, C = 8;
  std::mt19937 gen(23);
  Vec inp = random_vec(gen, N * C, -2.0, 2.0), weight = random_vec(gen, C, 0.5, 1.5);
  const Vec dout = random_vec(gen, N * C);
  const Norm norm{.rms = false, .eps = 1e-3f};
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), nullptr,
                           N, C, norm);
    return dot(dout, out);
  };
  loss();
  const Vec saved_mean = mean, saved_rstd = rstd;
  Vec dinp(N * C, 0.0), dweight(C, 0.0);
  ref::layernorm_backward(dinp.data(), dweight.data(), nullptr, dout.data(), inp.data(),
                          weight.data(), saved_mean.data(), saved_rstd.data(), N, C, norm);
  expect_gradient_matches("inp", inp, dinp, loss);
  expect_gradient_matches("weight", weight, dweight, loss);
}

TEST(ReferenceRmsNorm, ForwardGivesUnitMeanSquareWithIdentityWeight) {
  const int N = 5, C = 16;
  std::mt19937 gen(24);
  const Vec inp = random_vec(gen, N * C, -3.0, 5.0);  // not centred: RMSNorm must not centre it
  const Vec weight(C, 1.0);
  const Norm norm{.rms = true, .eps = 1e-6f};
  Vec out(N * C), rstd(N);
  ref::layernorm_forward(out.data(), nullptr, rstd.data(), inp.data(), weight.data(), nullptr, N, C,
                         norm);
  for (int n = 0; n < N; ++n) {
    double ms = 0, in_ms = 0;
    for (int c = 0; c < C; ++c) {
      ms += out[n * C + c] * out[n * C + c] / C;
      in_ms += inp[n * C + c] * inp[n * C + c] / C;
    }
    EXPECT_NEAR(ms, 1.0, 1e-5) << "row " << n;  // up to the eps
    EXPECT_NEAR(rstd[n], 1.0 / std::sqrt(in_ms + static_cast<double>(norm.eps)), 1e-12);
    // A rescaling of the row, no shift: out / inp is rstd everywhere.
    for (int c = 0; c < C; ++c) EXPECT_NEAR(out[n * C + c], inp[n * C + c] * rstd[n], 1e-14);
  }
}

TEST(ReferenceRmsNorm, BackwardMatchesFiniteDifferences) {
  const int N = 5, C = 8;
  std::mt19937 gen(25);
  Vec inp = random_vec(gen, N * C, -2.0, 3.0), weight = random_vec(gen, C, 0.5, 1.5);
  const Vec dout = random_vec(gen, N * C);
  const Norm norm{.rms = true, .eps = 1e-5f};
  Vec out(N * C), rstd(N);
  auto loss = [&] {
    ref::layernorm_forward(out.data(), nullptr, rstd.data(), inp.data(), weight.data(), nullptr, N,
                           C, norm);
    return dot(dout, out);
  };
  loss();
  const Vec saved_rstd = rstd;
  Vec dinp(N * C, 0.0), dweight(C, 0.0);
  ref::layernorm_backward(dinp.data(), dweight.data(), nullptr, dout.data(), inp.data(),
                          weight.data(), nullptr, saved_rstd.data(), N, C, norm);
  expect_gradient_matches("inp", inp, dinp, loss);
  expect_gradient_matches("weight", weight, dweight, loss);
}

// ---- matmul ----------------------------------------------------------------------------------

TEST(ReferenceMatmul, ForwardMatchesHandComputedProduct) {
  // inp [2,3], weight [2,3] (OC=2, IC=3), bias [2].
  const Vec inp = {1, 2, 3, 4, 5, 6};
  const Vec weight = {1, 0, -1, 2, 1, 0};
  const Vec bias = {10, 20};
  Vec out(4);
  ref::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), 2, 3, 2);
  EXPECT_EQ(out, (Vec{1 - 3 + 10, 2 + 2 + 20, 4 - 6 + 10, 8 + 5 + 20}));
  ref::matmul_forward(out.data(), inp.data(), weight.data(), nullptr, 2, 3, 2);
  EXPECT_EQ(out, (Vec{1 - 3, 2 + 2, 4 - 6, 8 + 5}));
}

void check_matmul_backward(bool with_bias) {
  const int N = 5, IC = 8, OC = 6;
  std::mt19937 gen(with_bias ? 5 : 6);
  Vec inp = random_vec(gen, N * IC), weight = random_vec(gen, OC * IC), bias = random_vec(gen, OC);
  const Vec dout = random_vec(gen, N * OC);
  auto loss = [&] {
    Vec out(N * OC);
    ref::matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N,
                        IC, OC);
    return dot(dout, out);
  };
  Vec dinp(N * IC, 0.0), dweight(OC * IC, 0.0), dbias(OC, 0.0);
  ref::matmul_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr, dout.data(),
                       inp.data(), weight.data(), N, IC, OC);
  expect_gradient_matches("inp", inp, dinp, loss);
  expect_gradient_matches("weight", weight, dweight, loss);
  if (with_bias) {
    expect_gradient_matches("bias", bias, dbias, loss);
  } else {
    EXPECT_EQ(dbias, Vec(OC, 0.0)) << "a null bias must leave the bias gradient alone";
  }
}

TEST(ReferenceMatmul, BackwardWithBiasMatchesFiniteDifferences) { check_matmul_backward(true); }

TEST(ReferenceMatmul, BackwardWithoutBiasMatchesFiniteDifferences) { check_matmul_backward(false); }

TEST(ReferenceMatmul, BackwardWithNullInputGradientStillGivesWeightGradient) {
  const int N = 5, IC = 8, OC = 6;
  std::mt19937 gen(7);
  const Vec inp = random_vec(gen, N * IC), weight = random_vec(gen, OC * IC);
  const Vec dout = random_vec(gen, N * OC);
  Vec dinp(N * IC, 0.0), dweight(OC * IC, 0.0), dbias(OC, 0.0);
  ref::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                       weight.data(), N, IC, OC);
  Vec dweight_only(OC * IC, 0.0), dbias_only(OC, 0.0);
  ref::matmul_backward(nullptr, dweight_only.data(), dbias_only.data(), dout.data(), inp.data(),
                       weight.data(), N, IC, OC);
  EXPECT_EQ(dweight_only, dweight);
  EXPECT_EQ(dbias_only, dbias);
}

// ---- attention -------------------------------------------------------------------------------

TEST(ReferenceAttention, ForwardIsCausalAndEachRowIsADistribution) {
  const int B = 2, T = 4, C = 8, NH = 2;
  std::mt19937 gen(8);
  const Vec qkv = random_vec(gen, B * T * 3 * C, -3.0, 3.0);
  Vec out(B * T * C), att(B * NH * T * T, -7.0);  // -7: every entry must be written
  ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NH);
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int t = 0; t < T; ++t) {
      const double* row = &att[(bh * T + t) * T];
      double sum = 0;
      for (int j = 0; j <= t; ++j) {
        EXPECT_GT(row[j], 0.0);
        sum += row[j];
      }
      for (int j = t + 1; j < T; ++j) EXPECT_EQ(row[j], 0.0) << "future position " << j;
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  }
}

TEST(ReferenceAttention, FirstPositionAttendsOnlyToItselfAndOutputsItsValue) {
  const int B = 1, T = 3, C = 4, NH = 2, HS = C / NH;
  std::mt19937 gen(9);
  const Vec qkv = random_vec(gen, B * T * 3 * C);
  Vec out(B * T * C), att(B * NH * T * T);
  ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NH);
  for (int h = 0; h < NH; ++h) {
    EXPECT_EQ(att[h * T * T], 1.0);
    for (int d = 0; d < HS; ++d) EXPECT_DOUBLE_EQ(out[h * HS + d], qkv[2 * C + h * HS + d]);
  }
}

TEST(ReferenceAttention, BackwardMatchesFiniteDifferences) {
  const int B = 2, T = 3, C = 8, NH = 2;
  std::mt19937 gen(10);
  Vec qkv = random_vec(gen, B * T * 3 * C);
  const Vec dout = random_vec(gen, B * T * C);
  Vec out(B * T * C), att(B * NH * T * T);
  auto loss = [&] {
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NH);
    return dot(dout, out);
  };
  loss();  // saves att at the unperturbed point
  const Vec saved_att = att;
  Vec dqkv(B * T * 3 * C, 0.0);
  ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), saved_att.data(), B, T, C, NH, NH);
  expect_gradient_matches("qkv", qkv, dqkv, loss);
}

// Grouped-query attention is multi-head attention with each key/value head repeated for the
// query heads of its group: qkv[N,C+2*NKV*HS] widened to [N,3C] by copying k and v heads.
Vec repeat_kv_heads(const Vec& qkv, int N, int C, int NH, int NKV) {
  const int HS = C / NH, group = NH / NKV, W = C + 2 * NKV * HS;
  Vec wide(static_cast<size_t>(N) * 3 * C);
  for (int n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) wide[n * 3 * C + c] = qkv[n * W + c];
    for (int h = 0; h < NH; ++h) {
      for (int d = 0; d < HS; ++d) {
        const int g = h / group;
        wide[n * 3 * C + C + h * HS + d] = qkv[n * W + C + g * HS + d];
        wide[n * 3 * C + 2 * C + h * HS + d] = qkv[n * W + C + NKV * HS + g * HS + d];
      }
    }
  }
  return wide;
}

TEST(ReferenceAttention, GroupedQueryIsMultiHeadWithRepeatedKeyValueHeads) {
  const int B = 2, T = 5, C = 16, NH = 4;
  for (const int NKV : {1, 2}) {
    SCOPED_TRACE("NKV=" + std::to_string(NKV));
    const int HS = C / NH, W = C + 2 * NKV * HS;
    std::mt19937 gen(26 + NKV);
    const Vec qkv = random_vec(gen, B * T * W, -2.0, 2.0), dout = random_vec(gen, B * T * C);
    const Vec wide = repeat_kv_heads(qkv, B * T, C, NH, NKV);
    Vec out(B * T * C), att(B * NH * T * T), wide_out(B * T * C), wide_att(B * NH * T * T);
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
    ref::attention_forward(wide_out.data(), wide_att.data(), wide.data(), B, T, C, NH, NH);
    EXPECT_EQ(out, wide_out);
    EXPECT_EQ(att, wide_att);
    // The backward: dq the same; a key/value head's dk, dv the sum of its repeats'.
    Vec dqkv(B * T * W), wide_dqkv(B * T * 3 * C);
    ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, NKV);
    ref::attention_backward(wide_dqkv.data(), dout.data(), wide.data(), att.data(), B, T, C, NH,
                            NH);
    for (int n = 0; n < B * T; ++n) {
      for (int c = 0; c < C; ++c) EXPECT_EQ(dqkv[n * W + c], wide_dqkv[n * 3 * C + c]);
      for (int g = 0; g < NKV; ++g) {
        for (int d = 0; d < HS; ++d) {
          double dk = 0, dv = 0;
          for (int h = g * (NH / NKV); h < (g + 1) * (NH / NKV); ++h) {
            dk += wide_dqkv[n * 3 * C + C + h * HS + d];
            dv += wide_dqkv[n * 3 * C + 2 * C + h * HS + d];
          }
          EXPECT_NEAR(dqkv[n * W + C + g * HS + d], dk, 1e-14);
          EXPECT_NEAR(dqkv[n * W + C + NKV * HS + g * HS + d], dv, 1e-14);
        }
      }
    }
  }
}

TEST(ReferenceAttention, GroupedQueryBackwardMatchesFiniteDifferences) {
  const int B = 2, T = 3, C = 8, NH = 4;
  for (const int NKV : {1, 2}) {
    SCOPED_TRACE("NKV=" + std::to_string(NKV));
    const int W = C + 2 * NKV * (C / NH);
    std::mt19937 gen(28 + NKV);
    Vec qkv = random_vec(gen, B * T * W);
    const Vec dout = random_vec(gen, B * T * C);
    Vec out(B * T * C), att(B * NH * T * T);
    auto loss = [&] {
      ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NKV);
      return dot(dout, out);
    };
    loss();
    const Vec saved_att = att;
    Vec dqkv(B * T * W, 0.0);
    ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), saved_att.data(), B, T, C, NH,
                            NKV);
    expect_gradient_matches("qkv", qkv, dqkv, loss);
  }
}

// ---- rotary position embedding ---------------------------------------------------------------

TEST(ReferenceRope, RotatesThePairsOfQAndKByTheAnglesOfThePosition) {
  const int B = 1, T = 3, NH = 2, NKV = 1, HS = 4, W = (NH + 2 * NKV) * HS;
  const double theta = 100.0;
  std::mt19937 gen(30);
  const Vec x = random_vec(gen, B * T * W);
  Vec y = x;
  ref::rope(y.data(), B, T, NH, NKV, HS, theta, false);
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < NH + 2 * NKV; ++h) {
      for (int i = 0; i < HS / 2; ++i) {
        // a = t * theta^(-2i/HS): for HS = 4 and theta = 100, t and t / 10; v is not rotated.
        const double a = h < NH + NKV ? t * (i == 0 ? 1.0 : 0.1) : 0.0;
        const int at = t * W + h * HS + i;
        EXPECT_NEAR(y[at], x[at] * std::cos(a) - x[at + 2] * std::sin(a), 1e-15);
        EXPECT_NEAR(y[at + 2], x[at + 2] * std::cos(a) + x[at] * std::sin(a), 1e-15);
      }
    }
  }
}

TEST(ReferenceRope, ScoresDependOnlyOnTheDistanceAndTheInverseUndoesIt) {
  // RoPE's point: q_t . k_s after rotation is a function of t - s. The same q and k at positions
  // (t, s) and (t + 2, s + 2) give the same score.
  const int T = 5, NH = 1, NKV = 1, HS = 8, W = 3 * HS;
  std::mt19937 gen(31);
  const Vec q = random_vec(gen, HS), k = random_vec(gen, HS);
  Vec x(T * W, 0.0);
  for (int t = 0; t < T; ++t) {
    for (int d = 0; d < HS; ++d) {
      x[t * W + d] = q[d];
      x[t * W + HS + d] = k[d];
    }
  }
  Vec y = x;
  ref::rope(y.data(), 1, T, NH, NKV, HS, 10000.0, false);
  auto score = [&](int t, int s) {
    double acc = 0;
    for (int d = 0; d < HS; ++d) acc += y[t * W + d] * y[s * W + HS + d];
    return acc;
  };
  EXPECT_NEAR(score(2, 0), score(4, 2), 1e-14);
  EXPECT_NEAR(score(1, 1), score(3, 3), 1e-14);
  EXPECT_NEAR(score(1, 1), dot(q, k), 1e-14);
  ref::rope(y.data(), 1, T, NH, NKV, HS, 10000.0, true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-15) << i;
}

TEST(ReferenceRope, InverseIsTheBackwardByFiniteDifferences) {
  const int B = 2, T = 4, NH = 4, NKV = 2, HS = 6, W = (NH + 2 * NKV) * HS;
  std::mt19937 gen(32);
  Vec x = random_vec(gen, B * T * W);
  const Vec dout = random_vec(gen, B * T * W);
  auto loss = [&] {
    Vec y = x;
    ref::rope(y.data(), B, T, NH, NKV, HS, 10.0, false);
    return dot(dout, y);
  };
  Vec dx = dout;
  ref::rope(dx.data(), B, T, NH, NKV, HS, 10.0, true);
  expect_gradient_matches("qkv", x, dx, loss);
}

// ---- SwiGLU ----------------------------------------------------------------------------------

TEST(ReferenceSwiglu, ForwardIsSiluOfTheGateTimesTheUpProjection) {
  const int N = 1, F = 3;
  const Vec inp = {0.0, 1.0, -2.0, 5.0, 3.0, 0.5};  // gate | up
  Vec out(N * F);
  ref::swiglu_forward(out.data(), inp.data(), N, F);
  EXPECT_EQ(out[0], 0.0);
  // silu(x) = x / (1 + e^-x): silu(1) = 0.7310585786300049, silu(-2) = -0.23840584404423515.
  EXPECT_NEAR(out[1], 0.7310585786300049 * 3.0, 1e-15);
  EXPECT_NEAR(out[2], -0.23840584404423515 * 0.5, 1e-15);
}

TEST(ReferenceSwiglu, BackwardMatchesFiniteDifferences) {
  const int N = 4, F = 7;
  std::mt19937 gen(33);
  Vec inp = random_vec(gen, N * 2 * F, -4.0, 4.0);
  const Vec dout = random_vec(gen, N * F);
  auto loss = [&] {
    Vec out(N * F);
    ref::swiglu_forward(out.data(), inp.data(), N, F);
    return dot(dout, out);
  };
  Vec dinp(N * 2 * F, 0.0);
  ref::swiglu_backward(dinp.data(), dout.data(), inp.data(), N, F);
  expect_gradient_matches("inp", inp, dinp, loss);
}

// ---- GeLU ------------------------------------------------------------------------------------

TEST(ReferenceGelu, ForwardMatchesTheTanhApproximation) {
  const Vec inp = {0.0, 1.0, -1.0, 10.0};
  Vec out(inp.size());
  ref::gelu_forward(out.data(), inp.data(), static_cast<int64_t>(inp.size()));
  EXPECT_EQ(out[0], 0.0);
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) evaluated independently (Python, double).
  EXPECT_NEAR(out[1], 0.8411919906082768, 1e-15);
  EXPECT_NEAR(out[2], -0.15880800939172324, 1e-15);
  EXPECT_NEAR(out[3], 10.0, 1e-12);
}

TEST(ReferenceGelu, BackwardMatchesFiniteDifferences) {
  const int64_t n = 40;
  std::mt19937 gen(11);
  Vec inp = random_vec(gen, n, -4.0, 4.0);
  const Vec dout = random_vec(gen, n);
  auto loss = [&] {
    Vec out(n);
    ref::gelu_forward(out.data(), inp.data(), n);
    return dot(dout, out);
  };
  Vec dinp(n, 0.0);
  ref::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  expect_gradient_matches("inp", inp, dinp, loss);
}

// ---- softmax cross-entropy -------------------------------------------------------------------

TEST(ReferenceSoftmaxCrossEntropy, ForwardMatchesNaiveLogSoftmax) {
  const int N = 3, V = 4, Vp = 4;
  const Vec logits = {0, 0, 0, 0, 1, 2, 3, 4, -1, 0.5, 2, -3};
  const std::vector<int32_t> targets = {2, 3, 0};
  Vec losses(N);
  ref::softmax_cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
  for (int n = 0; n < N; ++n) {
    double sum = 0;
    for (int j = 0; j < V; ++j) sum += std::exp(logits[n * Vp + j]);
    EXPECT_NEAR(losses[n], -std::log(std::exp(logits[n * Vp + targets[n]]) / sum), 1e-14);
  }
  EXPECT_NEAR(losses[0], std::log(4.0), 1e-15);
}

TEST(ReferenceSoftmaxCrossEntropy, ForwardIsStableForHugeLogits) {
  const int N = 1, V = 3, Vp = 3;
  const Vec logits = {1000.0, 1000.0, -1000.0};
  const std::vector<int32_t> targets = {0};
  Vec losses(N);
  ref::softmax_cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
  EXPECT_NEAR(losses[0], std::log(2.0), 1e-14);
  Vec grad = logits;
  ref::softmax_cross_entropy_fused(losses.data(), grad.data(), targets.data(), 1.0, N, V, Vp);
  EXPECT_NEAR(losses[0], std::log(2.0), 1e-14);
  EXPECT_NEAR(grad[0], -0.5, 1e-14);
  EXPECT_NEAR(grad[1], 0.5, 1e-14);
  EXPECT_EQ(grad[2], 0.0);
}

TEST(ReferenceSoftmaxCrossEntropy, FusedGradientMatchesFiniteDifferences) {
  const int N = 5, V = 7, Vp = 8;
  const double dloss = 1.0 / 3.0;  // e.g. 1 / (number of non-ignored targets)
  std::mt19937 gen(13);
  Vec logits = random_vec(gen, N * Vp, -2.0, 2.0);
  const std::vector<int32_t> targets = {0, 6, -1, 3, 3};
  auto loss = [&] {
    Vec losses(N);
    ref::softmax_cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    double sum = 0;
    for (double l : losses) sum += l;
    return dloss * sum;
  };
  Vec losses_fused(N), grad = logits;
  ref::softmax_cross_entropy_fused(losses_fused.data(), grad.data(), targets.data(), dloss, N, V,
                                   Vp);
  // The fused kernel's losses are the forward kernel's.
  Vec losses(N);
  ref::softmax_cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
  for (int n = 0; n < N; ++n) EXPECT_NEAR(losses_fused[n], losses[n], 1e-14) << "row " << n;
  // Over all Vp columns: the padding column's finite difference is 0 too.
  expect_gradient_matches("logits", logits, grad, loss);
}

TEST(ReferenceSoftmaxCrossEntropy, PaddingColumnsGetNoProbabilityAndExactlyZeroGradient) {
  const int N = 2, V = 3, Vp = 6;
  Vec logits = {0.1, 0.2, 0.3, 50.0, -50.0, 7.0, 1.0, -1.0, 0.5, 99.0, 99.0, 99.0};
  const std::vector<int32_t> targets = {1, 2};
  Vec padded_losses(N);
  ref::softmax_cross_entropy_forward(padded_losses.data(), logits.data(), targets.data(), N, V, Vp);
  // The same rows without the padding columns give the same loss.
  const Vec unpadded = {0.1, 0.2, 0.3, 1.0, -1.0, 0.5};
  Vec losses(N);
  ref::softmax_cross_entropy_forward(losses.data(), unpadded.data(), targets.data(), N, V, V);
  EXPECT_EQ(padded_losses, losses);
  ref::softmax_cross_entropy_fused(padded_losses.data(), logits.data(), targets.data(), 1.0, N, V,
                                   Vp);
  for (int n = 0; n < N; ++n) {
    double row_sum = 0;  // sum_j (p_j - onehot_j) = 0
    for (int j = 0; j < V; ++j) row_sum += logits[n * Vp + j];
    EXPECT_NEAR(row_sum, 0.0, 1e-15);
    for (int j = V; j < Vp; ++j) EXPECT_EQ(logits[n * Vp + j], 0.0) << "row " << n << " col " << j;
  }
}

TEST(ReferenceSoftmaxCrossEntropy, IgnoredTargetRowHasZeroLossAndZeroGradient) {
  const int N = 2, V = 3, Vp = 4;
  Vec logits = {0.1, 0.2, 0.3, 9.0, 1.0, -1.0, 0.5, 9.0};
  const std::vector<int32_t> targets = {-1, 0};
  Vec losses(N, 123.0);
  ref::softmax_cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
  EXPECT_EQ(losses[0], 0.0);
  EXPECT_GT(losses[1], 0.0);
  losses.assign(N, 123.0);
  ref::softmax_cross_entropy_fused(losses.data(), logits.data(), targets.data(), 2.0, N, V, Vp);
  EXPECT_EQ(losses[0], 0.0);
  for (int j = 0; j < Vp; ++j) EXPECT_EQ(logits[j], 0.0) << "col " << j;
  EXPECT_LT(logits[Vp + 0], 0.0);  // the target column of the kept row
}

// ---- the gradient rule of every backward kernel (ops.inc) ----------------------------------

// Runs `backward` into zeroed buffers, then again after filling the `written` gradients with NaN
// (the `added` ones keep the first result). A written gradient must come out the same as the
// first time, bit for bit, whatever its buffer held; an added one must come out twice the first
// result.
void expect_gradient_rule(const std::string& name, std::vector<Vec*> written,
                          std::vector<Vec*> added, const std::function<void()>& backward) {
  SCOPED_TRACE(name);
  for (Vec* g : written) std::fill(g->begin(), g->end(), 0.0);
  for (Vec* g : added) std::fill(g->begin(), g->end(), 0.0);
  backward();
  std::vector<Vec> written_once, added_once;
  for (Vec* g : written) written_once.push_back(*g);
  for (Vec* g : added) added_once.push_back(*g);
  for (Vec* g : written) std::fill(g->begin(), g->end(), std::nan(""));
  backward();
  for (size_t k = 0; k < written.size(); ++k) {
    EXPECT_GT(max_abs(written_once[k]), 0.0) << "written gradient " << k << " is all zero";
    // NaN != NaN: an element that kept or added to the NaN fails.
    EXPECT_EQ(*written[k], written_once[k]) << "written gradient " << k << " depends on its buffer";
  }
  for (size_t k = 0; k < added.size(); ++k) {
    EXPECT_GT(max_abs(added_once[k]), 0.0) << "added gradient " << k << " is all zero";
    for (size_t i = 0; i < added_once[k].size(); ++i) {
      // Not bitwise: a gradient summed over several terms rounds differently on top of a
      // non-zero start.
      EXPECT_NEAR((*added[k])[i], 2 * added_once[k][i], 1e-14)
          << "added gradient " << k << " element " << i;
    }
  }
}

TEST(ReferenceBackward, ActivationGradientsAreWrittenAndParameterGradientsAdd) {
  const int B = 2, T = 3, C = 8, NH = 2, V = 7, N = B * T, OC = 6;
  std::mt19937 gen(14);
  const std::vector<int32_t> tokens = {1, 5, 1, 0, 6, 2};
  const Vec dout = random_vec(gen, N * C), dout_oc = random_vec(gen, N * OC);
  const Vec inp = random_vec(gen, N * C), weight = random_vec(gen, OC * C);
  const Vec ln_weight = random_vec(gen, C), qkv = random_vec(gen, N * 3 * C);

  Vec dwte(V * C), dwpe(T * C);
  expect_gradient_rule("embedding", {}, {&dwte, &dwpe}, [&] {
    ref::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  });

  // layernorm_backward's dinp adds: it is the residual stream's gradient.
  Vec out(N * C), mean(N), rstd(N);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), ln_weight.data(),
                         ln_weight.data(), N, C);
  Vec dinp(N * C), dweight(C), dbias(C);
  expect_gradient_rule("layernorm", {}, {&dinp, &dweight, &dbias}, [&] {
    ref::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                            ln_weight.data(), mean.data(), rstd.data(), N, C);
  });

  Vec dmm_inp(N * C), dmm_weight(OC * C), dmm_bias(OC);
  expect_gradient_rule("matmul", {&dmm_inp}, {&dmm_weight, &dmm_bias}, [&] {
    ref::matmul_backward(dmm_inp.data(), dmm_weight.data(), dmm_bias.data(), dout_oc.data(),
                         inp.data(), weight.data(), N, C, OC);
  });

  Vec att(B * NH * T * T);
  ref::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, NH);
  Vec dqkv(N * 3 * C);
  expect_gradient_rule("attention", {&dqkv}, {}, [&] {
    ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, NH);
  });

  Vec dgelu(N * C);
  expect_gradient_rule("gelu", {&dgelu}, {},
                       [&] { ref::gelu_backward(dgelu.data(), inp.data(), dout.data(), N * C); });

  // RMSNorm's dinp adds as LayerNorm's; grouped-query attention and SwiGLU write theirs.
  const Norm rms{.rms = true};
  ref::layernorm_forward(out.data(), nullptr, rstd.data(), inp.data(), ln_weight.data(), nullptr, N,
                         C, rms);
  expect_gradient_rule("rmsnorm", {}, {&dinp, &dweight}, [&] {
    ref::layernorm_backward(dinp.data(), dweight.data(), nullptr, dout.data(), inp.data(),
                            ln_weight.data(), nullptr, rstd.data(), N, C, rms);
  });
  const int NKV = 1, W = C + 2 * NKV * (C / NH);
  const Vec gqa = random_vec(gen, N * W);
  ref::attention_forward(out.data(), att.data(), gqa.data(), B, T, C, NH, NKV);
  Vec dgqa(N * W);
  expect_gradient_rule("grouped-query attention", {&dgqa}, {}, [&] {
    ref::attention_backward(dgqa.data(), dout.data(), gqa.data(), att.data(), B, T, C, NH, NKV);
  });
  const Vec gate_up = random_vec(gen, N * 2 * C);
  Vec dswiglu(N * 2 * C);
  expect_gradient_rule("swiglu", {&dswiglu}, {}, [&] {
    ref::swiglu_backward(dswiglu.data(), dout.data(), gate_up.data(), N, C);
  });
}

// ---- optimizer -------------------------------------------------------------------------------

TEST(ReferenceAdamW, TwoStepsMatchHandComputedValues) {
  // lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01.
  Vec params = {1.0, -2.0, 0.5}, m(3, 0.0), v(3, 0.0);
  const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;

  // Step 1, g = (0.5, -0.1, 0). Element 0: m = 0.05, v = 0.00025, mhat = 0.5, vhat = 0.25,
  // p = 1 - 0.1 (0.5 / (0.5 + 1e-8) + 0.01 * 1) = 0.899000002 (to 1e-16). Element 1 likewise:
  // mhat / sqrt(vhat) = -1, p = -2 - 0.1 (-1 + 0.01 * -2) = -1.898. Element 2 has no gradient:
  // only the decoupled weight decay acts, p = 0.5 - 0.1 * 0.01 * 0.5 = 0.4995.
  const Vec g1 = {0.5, -0.1, 0.0};
  ref::adamw_update(params.data(), g1.data(), m.data(), v.data(), 3, lr, b1, b2, eps, wd, 1);
  EXPECT_NEAR(m[0], 0.05, 1e-15);
  EXPECT_NEAR(v[0], 0.00025, 1e-15);
  EXPECT_NEAR(params[0], 0.899000002, 1e-12);
  EXPECT_NEAR(params[1], -1.898, 1e-7);  // eps / |g| ~ 1e-7 relative
  EXPECT_NEAR(params[2], 0.4995, 1e-15);

  // Step 2, g = (-0.3, 0.2, 0.4); values of the same formulas evaluated in Python (double).
  const Vec g2 = {-0.3, 0.2, 0.4};
  ref::adamw_update(params.data(), g2.data(), m.data(), v.data(), 3, lr, b1, b2, eps, wd, 2);
  EXPECT_NEAR(m[0], 0.9 * 0.05 + 0.1 * -0.3, 1e-15);
  EXPECT_NEAR(v[0], 0.999 * 0.00025 + 0.001 * 0.09, 1e-15);
  EXPECT_NEAR(params[0], 0.8789511989397751, 1e-12);
  EXPECT_NEAR(params[1], -1.9327123603784888, 1e-12);
  EXPECT_NEAR(params[2], 0.42458682027356487, 1e-12);
}

// ---- sum_squares -----------------------------------------------------------------------------

TEST(ReferenceSumSquares, AddsSquaresInDouble) {
  const Vec x = {1.0, -2.0, 3.0};
  EXPECT_EQ(ref::sum_squares(x.data(), 3), 14.0);
  EXPECT_EQ(ref::sum_squares(x.data(), 0), 0.0);
  // A float input is accumulated in double: 1e8 + 1 is not representable in float.
  const std::vector<float> f = {1e4f, 1.0f};
  EXPECT_EQ(ref::sum_squares(f.data(), 2), 100000001.0);
}

TEST(ReferenceKernels, InstantiateForFloatWithNullPointersAndDoubleLiterals) {
  // T is deduced from the tensors only: nullptr and double literals are accepted as-is.
  std::vector<float> x = {1.0f, 2.0f}, w = {1.0f, 1.0f}, out(1), dw(2), g = {0.5f, 0.5f};
  ref::matmul_forward(out.data(), x.data(), w.data(), nullptr, 1, 2, 1);
  EXPECT_EQ(out[0], 3.0f);
  ref::matmul_backward(nullptr, dw.data(), nullptr, out.data(), x.data(), w.data(), 1, 2, 1);
  EXPECT_EQ(dw, (std::vector<float>{3.0f, 6.0f}));
  std::vector<float> m(2, 0.0f), v(2, 0.0f);
  ref::adamw_update(x.data(), g.data(), m.data(), v.data(), 2, 0.1, 0.9, 0.999, 1e-8, 0.0, 1);
  EXPECT_NEAR(x[0], 0.9f, 1e-6f);  // first step moves by lr * sign(g)
}

}  // namespace
}  // namespace weft::kernels
