// sgemm_bf16 (bf16 inputs, fp32 accumulation and output) against a double-precision GEMM of the
// bf16-rounded inputs (which it must match to fp32 accumulation error) and of the fp32 inputs
// (which it must match to bf16 rounding error), including the chunked paths for large operands;
// and the linear layers under MatmulPrecision::BF16 against F32.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/reference_gemm.h"
#include "support/rel_error.h"
#include "weft/core/dtype.h"
#include "weft/kernels/gemm.h"
#include "weft/kernels/kernels.h"

namespace weft::kernels {
namespace {

using test::reference_gemm;
using test::rel_error;

using Floats = std::vector<float>;
using Doubles = std::vector<double>;

// sgemm_bf16 vs a double GEMM of the same bf16-rounded inputs: only fp32 accumulation differs.
constexpr double kAccumulationTol = 1e-6;
// bf16 vs fp32 inputs: bf16 keeps 8 significant bits (relative rounding error <= 2^-9 per input).
constexpr double kBf16Tol = 1e-2;

Floats random_floats(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Floats x(static_cast<size_t>(n));
  for (float& v : x) v = dist(gen);
  return x;
}

Floats bf16_rounded(const Floats& x) {
  Floats y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = BF16::from_float(x[i]).to_float();
  return y;
}

struct Case {
  int64_t M, N, K;
  bool ta, tb;
  int64_t pad;  // added to every leading dimension
  float alpha, beta;
};

std::string describe(const Case& c) {
  return "M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " trans_a=" + (c.ta ? "T" : "N") + " trans_b=" + (c.tb ? "T" : "N") +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta);
}

// Runs sgemm_bf16 on random inputs and checks it against both double references.
void check_case(const Case& c) {
  SCOPED_TRACE(describe(c));
  const int64_t lda = (c.ta ? c.M : c.K) + c.pad, ldb = (c.tb ? c.K : c.N) + c.pad;
  const int64_t ldc = c.N + c.pad;
  const Floats A = random_floats((c.ta ? c.K : c.M) * lda, 1);
  const Floats B = random_floats((c.tb ? c.N : c.K) * ldb, 2);
  Floats C = random_floats(c.M * ldc, 3);
  Doubles ref_rounded(C.begin(), C.end()), ref_fp32(C.begin(), C.end());
  sgemm_bf16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(),
             ldc);
  reference_gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, bf16_rounded(A), lda, bf16_rounded(B), ldb,
                 c.beta, ref_rounded, ldc);
  reference_gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A, lda, B, ldb, c.beta, ref_fp32, ldc);
  EXPECT_LT(rel_error(C, ref_rounded), kAccumulationTol) << "vs the bf16-rounded inputs";
  EXPECT_LT(rel_error(C, ref_fp32), kBf16Tol) << "vs the fp32 inputs";
}

// Every sgemm_bf16 test runs on both of its paths (gemm.h, Bf16GemmPath): oneDNN's bf16 matmul
// where the host has one (skipped elsewhere), and the widened fp32 path forced, which AVX2-only
// hosts always take, so that neither goes untested on either kind of host.
class SgemmBf16 : public ::testing::TestWithParam<Bf16GemmPath> {
 protected:
  void SetUp() override {
    force_bf16_gemm_widened(GetParam() == Bf16GemmPath::Widened);
    if (bf16_gemm_path() != GetParam()) GTEST_SKIP() << "this CPU has no oneDNN bf16 matmul";
  }
  void TearDown() override { force_bf16_gemm_widened(false); }
};

INSTANTIATE_TEST_SUITE_P(Paths, SgemmBf16,
                         ::testing::Values(Bf16GemmPath::Native, Bf16GemmPath::Widened),
                         [](const auto& info) {
                           return info.param == Bf16GemmPath::Native ? "Native" : "Widened";
                         });

TEST_P(SgemmBf16, MatchesDoubleGemmOfRoundedInputsForAllTransposesAlphasAndBetas) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      check_case({37, 29, 53, ta, tb, 5, 0.75f, 0.5f});
      check_case({37, 29, 53, ta, tb, 0, 1.f, 1.f});
      check_case({1, 67, 3, ta, tb, 3, -1.25f, 0.f});
      check_case({130, 96, 200, ta, tb, 1, 1.f, 0.f});
    }
  }
}

// Operands above sgemm_bf16's chunk size (2^23 elements) are converted and multiplied in chunks:
// along M (A too large), N (B too large) or K (both, or K the longest side of a too-large one).
TEST_P(SgemmBf16, ChunkedLargeOperandsMatchDoubleGemm) {
  check_case({20001, 7, 500, true, false, 3, 1.f, 1.f});     // A = 10.0M elements: chunks of M
  check_case({7, 20001, 500, false, true, 3, 1.f, 0.5f});    // B = 10.0M elements: chunks of N
  check_case({600, 16, 16001, false, false, 1, 0.5f, 1.f});  // A = 9.6M elements: chunks of K
}

TEST_P(SgemmBf16, WithBetaZeroOverwritesTheOutput) {
  const int M = 17, N = 19, K = 23;
  const Floats A = random_floats(int64_t{M} * K, 4), B = random_floats(int64_t{K} * N, 5);
  Floats C(static_cast<size_t>(M) * N, 1e30f);
  Doubles ref(C.size(), 0.0);
  sgemm_bf16(false, false, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C.data(), N);
  reference_gemm(false, false, M, N, K, 1.0, bf16_rounded(A), K, bf16_rounded(B), N, 0.0, ref, N);
  EXPECT_LT(rel_error(C, ref), kAccumulationTol);
}

TEST_P(SgemmBf16, WithAnEmptyInnerDimensionScalesTheOutputByBeta) {
  Floats C = {1.f, 2.f, 3.f, 4.f, 5.f, 6.f};
  const Floats A = {0.f}, B = {0.f};
  sgemm_bf16(false, false, 2, 3, 0, 1.f, A.data(), 1, B.data(), 3, 0.5f, C.data(), 3);
  EXPECT_EQ(C, (Floats{0.5f, 1.f, 1.5f, 2.f, 2.5f, 3.f}));
  sgemm_bf16(true, true, 2, 3, 0, 1.f, A.data(), 2, B.data(), 1, 0.f, C.data(), 3);
  EXPECT_EQ(C, Floats(6, 0.f));
}

TEST_P(SgemmBf16, GivesBitIdenticalResultsOnTwoRuns) {
  const int64_t M = 301, N = 263, K = 131;
  const Floats A = random_floats(M * K, 6), B = random_floats(N * K, 7);
  Floats C1(static_cast<size_t>(M * N), 0.f), C2 = C1;
  sgemm_bf16(false, true, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f, C1.data(), N);
  sgemm_bf16(false, true, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f, C2.data(), N);
  EXPECT_EQ(std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float)), 0);
}

// ---- matmul precision ----------------------------------------------------------------------

// Sets a precision for one scope and restores F32 (the default every other test assumes).
class ScopedPrecision {
 public:
  explicit ScopedPrecision(MatmulPrecision p) { set_matmul_precision(p); }
  ~ScopedPrecision() { set_matmul_precision(MatmulPrecision::F32); }
  ScopedPrecision(const ScopedPrecision&) = delete;
  ScopedPrecision& operator=(const ScopedPrecision&) = delete;
};

TEST(MatmulPrecision, DefaultsToF32AndRoundTrips) {
  EXPECT_EQ(matmul_precision(), MatmulPrecision::F32);
  set_matmul_precision(MatmulPrecision::BF16);
  EXPECT_EQ(matmul_precision(), MatmulPrecision::BF16);
  set_matmul_precision(MatmulPrecision::F32);
  EXPECT_EQ(matmul_precision(), MatmulPrecision::F32);
}

struct Linear {
  int N, IC, OC;
};

// matmul_forward (with bias) and matmul_backward (dinp written over NaN, the parameter gradients
// added into prefilled values: ops.inc's rule) at `p`.
struct LinearResults {
  Floats out, dinp, dweight, dbias;
};
LinearResults run_linear(const Linear& s, MatmulPrecision p) {
  const ScopedPrecision precision(p);
  const Floats inp = random_floats(int64_t{s.N} * s.IC, 10);
  const Floats weight = random_floats(int64_t{s.OC} * s.IC, 11);
  const Floats bias = random_floats(s.OC, 12);
  const Floats dout = random_floats(int64_t{s.N} * s.OC, 13);
  LinearResults r{Floats(static_cast<size_t>(s.N) * s.OC),
                  Floats(static_cast<size_t>(s.N) * s.IC, std::nanf("")),
                  random_floats(int64_t{s.OC} * s.IC, 15), random_floats(s.OC, 16)};
  cpu::matmul_forward(r.out.data(), inp.data(), weight.data(), bias.data(), s.N, s.IC, s.OC);
  cpu::matmul_backward(r.dinp.data(), r.dweight.data(), r.dbias.data(), dout.data(), inp.data(),
                       weight.data(), s.N, s.IC, s.OC);
  return r;
}

TEST(MatmulPrecision, Bf16LinearLayersMatchF32WithinBf16Tolerance) {
  for (const Linear s : {Linear{51, 37, 45}, Linear{256, 192, 576}}) {
    SCOPED_TRACE("N=" + std::to_string(s.N) + " IC=" + std::to_string(s.IC) +
                 " OC=" + std::to_string(s.OC));
    const LinearResults f32 = run_linear(s, MatmulPrecision::F32);
    const LinearResults bf16 = run_linear(s, MatmulPrecision::BF16);
    // The parameter gradients are compared as what was added to the prefill.
    const Floats dweight0 = random_floats(int64_t{s.OC} * s.IC, 15);
    auto added = [](const Floats& g, const Floats& g0) {
      Floats d(g.size());
      for (size_t i = 0; i < g.size(); ++i) d[i] = g[i] - g0[i];
      return d;
    };
    for (const auto& [name, a, b] :
         {std::tuple{"out", bf16.out, f32.out}, std::tuple{"dinp", bf16.dinp, f32.dinp},
          std::tuple{"dweight", added(bf16.dweight, dweight0), added(f32.dweight, dweight0)}}) {
      const double err = rel_error(a, b);
      EXPECT_LT(err, kBf16Tol) << name;
      EXPECT_GT(err, 1e-6) << name << ": identical to fp32, so the bf16 GEMM did not run";
    }
    EXPECT_EQ(bf16.dbias, f32.dbias);  // a column sum, not a GEMM
  }
}

}  // namespace
}  // namespace weft::kernels
