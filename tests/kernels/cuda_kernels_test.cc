// The CUDA kernels (weft::kernels::cuda) against the reference templates (weft::kernels::ref, run
// in double on the very values the device sees: bf16 inputs are rounded on the host first).
// Fresh random inputs every run (the seed is printed with any failure), sizes above a warp and
// odd ones (C=77, T=67, V=1001 padded to 1024); outputs that a kernel writes (activation gradients
// too, ops.inc's rule) are poisoned with NaN first, so an element it forgets, or adds into, fails;
// gradients it adds into (parameter gradients, LayerNorm's dinp) start from random values.
// Tolerances: ||out - ref|| / ||ref|| <= 1e-5 for fp32 results, <= 1e-2 for bf16 ones.
//
// Every test starts in CudaKernels::SetUp, which skips it where no GPU is visible: on such a
// machine the whole binary skips, and ctest reports it as skipped (tests/kernels/CMakeLists.txt).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/kernel_reference.h"
#include "support/rel_error.h"
#include "weft/core/check.h"
#include "weft/core/dtype.h"
#include "weft/kernels/cuda/arena.h"
#include "weft/kernels/cuda/context.h"
#include "weft/kernels/cuda/cuda_check.h"
#include "weft/kernels/cuda/kernels_cuda.h"

namespace weft::kernels::cuda {
namespace {

using test::rel_error;
using test::to_double;

using Floats = std::vector<float>;
using Doubles = std::vector<double>;

constexpr double kTolF32 = 1e-5;
constexpr double kTol16 = 1e-2;
constexpr const char* kNoDevice = "weft-cuda-skip: no CUDA device visible";

// ---- host-side values ---------------------------------------------------------------------

template <typename T>
Doubles widen(const std::vector<T>& x) {
  Doubles out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_double(x[i]);
  return out;
}

std::vector<BF16> round16(const Floats& x) {
  std::vector<BF16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = BF16::from_float(x[i]);
  return out;
}

#define EXPECT_CLOSE(actual, reference, tol) \
  EXPECT_LE(rel_error((actual), (reference)), (tol)) << #actual " vs " #reference

// Columns [col0, col0 + width) of each row of a row-major [rows, ld] matrix.
Doubles columns(const Doubles& x, int64_t rows, int64_t ld, int64_t col0, int64_t width) {
  Doubles out;
  out.reserve(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) out.push_back(x[static_cast<size_t>(r * ld + col0 + c)]);
  }
  return out;
}

// ---- the fixture ------------------------------------------------------------------------------

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << kNoDevice;
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__,
                                                      "random seed " + std::to_string(seed_));
    arena_ = std::make_unique<Arena>(size_t{1} << 30);
    ctx_ = std::make_unique<Context>(*arena_);
  }
  void TearDown() override {
    if (arena_ != nullptr) WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  }

  Floats random(int64_t n, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    Floats x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng_);
    return x;
  }
  std::vector<int32_t> random_tokens(int64_t n, int V) {
    std::uniform_int_distribution<int32_t> dist(0, V - 1);
    std::vector<int32_t> x(static_cast<size_t>(n));
    for (int32_t& v : x) v = dist(rng_);
    return x;
  }

  template <typename T>
  T* upload(const std::vector<T>& x) {
    T* p = arena_->allocate<T>(static_cast<int64_t>(x.size()));
    copy_to_device(p, x.data(), x.size() * sizeof(T));
    return p;
  }
  // Every byte 0xFF: NaN as float and bf16.
  template <typename T>
  T* poisoned(int64_t n) {
    T* p = arena_->allocate<T>(n);
    WEFT_CUDA_CHECK(cudaMemset(p, 0xFF, static_cast<size_t>(n) * sizeof(T)));
    return p;
  }
  template <typename T>
  std::vector<T> download(const T* p, int64_t n) {
    std::vector<T> x(static_cast<size_t>(n));
    WEFT_CUDA_CHECK(cudaDeviceSynchronize());
    copy_to_host(x.data(), p, x.size() * sizeof(T));
    return x;
  }
  template <typename T>
  Doubles download_wide(const T* p, int64_t n) {
    return widen(download(p, n));
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Context> ctx_;
};

// ==== memory and errors ======================================================================

TEST_F(CudaKernels, ArenaAlignsBlocksAndReleasesToAMark) {
  Arena arena(1 << 20);
  void* a = arena.allocate(3);
  void* b = arena.allocate(5, 16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % Arena::kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 16, 0u);
  const size_t mark = arena.mark();
  void* c = arena.allocate(1000);
  arena.release(mark);
  EXPECT_EQ(arena.allocate(1000), c);
  EXPECT_THROW(arena.allocate(size_t{2} << 20), Error);
  // The memory is real device memory.
  const Floats x = random(1000 / sizeof(float));
  copy_to_device(c, x.data(), x.size() * sizeof(float));
  EXPECT_EQ(download(static_cast<const float*>(c), static_cast<int64_t>(x.size())), x);
}

TEST_F(CudaKernels, FailedCudaCallsThrowWithTheCallAndCudasMessage) {
  float host = 0.f;
  try {
    WEFT_CUDA_CHECK(cudaMemcpy(&host, &host, sizeof(float), static_cast<cudaMemcpyKind>(99)));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("CUDA error"), std::string::npos) << message;
    EXPECT_NE(message.find("cudaMemcpy"), std::string::npos) << message;
    EXPECT_NE(message.find("cuda_kernels_test.cc"), std::string::npos) << message;
  }
}

// ==== the kernels ==============================================================================

TEST_F(CudaKernels, ConversionsRoundLikeTheHost) {
  const int64_t n = 100003;
  Floats x = random(n, -70000.f, 70000.f);
  const Floats small = random(1000, -1e-3f, 1e-3f);
  std::copy(small.begin(), small.end(), x.begin());
  BF16* half = poisoned<BF16>(n);
  convert(half, upload(x), n);
  const auto got = download(half, n);
  const auto want = round16(x);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i].bits, want[i].bits) << "x=" << x[i];
}

TEST_F(CudaKernels, EmbeddingForwardAndBackward) {
  const int B = 3, T = 67, C = 80, V = 1001;
  const auto tokens = random_tokens(B * T, V);
  const auto wte = round16(random(V * C)), wpe = round16(random(T * C));
  BF16* out = poisoned<BF16>(B * T * C);
  embedding_forward(out, upload(tokens), upload(wte), upload(wpe), B, T, C);
  Doubles ref(B * T * C);
  ref::embedding_forward(ref.data(), tokens.data(), widen(wte).data(), widen(wpe).data(), B, T, C);
  EXPECT_CLOSE(download_wide(out, B * T * C), ref, kTol16);

  const auto dout = round16(random(B * T * C));
  const Floats dwte0 = random(V * C), dwpe0 = random(T * C);
  float* dwte = upload(dwte0);
  float* dwpe = upload(dwpe0);
  embedding_backward(*ctx_, dwte, dwpe, upload(dout), tokens.data(), B, T, C);
  Doubles ref_dwte = widen(dwte0), ref_dwpe = widen(dwpe0);
  ref::embedding_backward(ref_dwte.data(), ref_dwpe.data(), widen(dout).data(), tokens.data(), B, T,
                          C);
  const Floats first = download(dwte, V * C);
  EXPECT_CLOSE(widen(first), ref_dwte, kTolF32);
  EXPECT_CLOSE(download_wide(dwpe, T * C), ref_dwpe, kTolF32);
  // The same inputs give the same bits.
  float* again = upload(dwte0);
  embedding_backward(*ctx_, again, upload(dwpe0), upload(dout), tokens.data(), B, T, C);
  EXPECT_EQ(download(again, V * C), first);
}

TEST_F(CudaKernels, LayerNormForwardFusedWithTheResidualAndBackward) {
  const int N = 131, C = 776;
  const auto a = round16(random(N * C, -2.f, 3.f));
  const auto b = round16(random(N * C));
  const auto w = round16(random(C)), bias = round16(random(C));
  BF16* residual = poisoned<BF16>(N * C);
  BF16* out = poisoned<BF16>(N * C);
  float* mean = poisoned<float>(N);
  float* rstd = poisoned<float>(N);
  BF16* a_d = upload(a);
  BF16* w_d = upload(w);
  fused_residual_layernorm_forward(residual, out, mean, rstd, a_d, upload(b), w_d, upload(bias), N,
                                   C, Norm{});
  // The residual is a + b rounded once, exactly as the host rounds.
  std::vector<BF16> want_residual(N * C);
  for (int i = 0; i < N * C; ++i)
    want_residual[i] = BF16::from_float(a[i].to_float() + b[i].to_float());
  const auto got_residual = download(residual, N * C);
  for (int i = 0; i < N * C; ++i) ASSERT_EQ(got_residual[i].bits, want_residual[i].bits) << i;
  Doubles ref_out(N * C), ref_mean(N), ref_rstd(N);
  ref::layernorm_forward(ref_out.data(), ref_mean.data(), ref_rstd.data(),
                         widen(want_residual).data(), widen(w).data(), widen(bias).data(), N, C);
  EXPECT_CLOSE(download_wide(out, N * C), ref_out, kTol16);
  EXPECT_CLOSE(download_wide(mean, N), ref_mean, kTolF32);
  EXPECT_CLOSE(download_wide(rstd, N), ref_rstd, kTolF32);

  // Plain LayerNorm of the same input gives the same bits.
  BF16* out2 = poisoned<BF16>(N * C);
  layernorm_forward(out2, mean, rstd, residual, w_d, upload(bias), N, C, Norm{});
  const auto o1 = download(out, N * C);
  const auto o2 = download(out2, N * C);
  EXPECT_EQ(std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(BF16)), 0);

  // Backward: dinp adds into the residual stream's gradient; dweight, dbias add (fp32).
  const auto dy = round16(random(N * C));
  const auto dx0 = round16(random(N * C));
  const Floats dw0 = random(C), db0 = random(C);
  BF16* dx = upload(dx0);
  float* dw = upload(dw0);
  float* db = upload(db0);
  layernorm_backward(*ctx_, dx, dw, db, upload(dy), residual, w_d, mean, rstd, N, C, Norm{});
  const Doubles dev_mean = download_wide(mean, N), dev_rstd = download_wide(rstd, N);
  Doubles ref_dx = widen(dx0), ref_dw = widen(dw0), ref_db = widen(db0);
  ref::layernorm_backward(ref_dx.data(), ref_dw.data(), ref_db.data(), widen(dy).data(),
                          widen(want_residual).data(), widen(w).data(), dev_mean.data(),
                          dev_rstd.data(), N, C);
  EXPECT_CLOSE(download_wide(dx, N * C), ref_dx, kTol16);
  EXPECT_CLOSE(download_wide(dw, C), ref_dw, kTolF32);
  EXPECT_CLOSE(download_wide(db, C), ref_db, kTolF32);
}

TEST_F(CudaKernels, EmbeddingWithoutAPositionTable) {
  const int B = 3, T = 67, C = 80, V = 13;
  const auto tokens = random_tokens(B * T, V);
  const auto wte = round16(random(V * C));
  BF16* out = poisoned<BF16>(B * T * C);
  embedding_forward(out, upload(tokens), upload(wte), nullptr, B, T, C);
  const auto got = download(out, B * T * C);
  for (int n = 0; n < B * T; ++n) {
    for (int c = 0; c < C; ++c) {
      ASSERT_EQ(got[n * C + c].bits, wte[tokens[n] * C + c].bits) << "row " << n;
    }
  }
  const auto dout = round16(random(B * T * C));
  const Floats dwte0 = random(V * C);
  float* dwte = upload(dwte0);
  embedding_backward(*ctx_, dwte, nullptr, upload(dout), tokens.data(), B, T, C);
  Doubles ref_dwte = widen(dwte0);
  ref::embedding_backward(ref_dwte.data(), nullptr, widen(dout).data(), tokens.data(), B, T, C);
  EXPECT_CLOSE(download_wide(dwte, V * C), ref_dwte, kTolF32);
}

// RMSNorm and LayerNorm without bias at another epsilon: forward (plain and fused with the
// residual add) and backward, on both backward paths: the fused kernel (C a multiple of 8) and
// the dinp kernel + column sums (C odd).
TEST_F(CudaKernels, RmsNormAndBiasFreeLayerNormForwardAndBackward) {
  const int N = 131;
  for (const int C : {776, 77}) {
    for (const Norm norm : {Norm{.rms = true, .eps = 1e-6f}, Norm{.rms = false, .eps = 1e-3f}}) {
      SCOPED_TRACE(::testing::Message() << "C=" << C << (norm.rms ? " RMSNorm" : " LayerNorm"));
      const auto x = round16(random(N * C, -1.f, 2.f));
      const auto w = round16(random(C, 0.5f, 1.5f));
      BF16* x_d = upload(x);
      BF16* w_d = upload(w);
      BF16* out = poisoned<BF16>(N * C);
      float* mean = norm.rms ? nullptr : poisoned<float>(N);
      float* rstd = poisoned<float>(N);
      layernorm_forward(out, mean, rstd, x_d, w_d, nullptr, N, C, norm);
      Doubles ref_out(N * C), ref_mean(N), ref_rstd(N);
      double* ref_mean_p = norm.rms ? nullptr : ref_mean.data();
      ref::layernorm_forward(ref_out.data(), ref_mean_p, ref_rstd.data(), widen(x).data(),
                             widen(w).data(), nullptr, N, C, norm);
      EXPECT_CLOSE(download_wide(out, N * C), ref_out, kTol16);
      EXPECT_CLOSE(download_wide(rstd, N), ref_rstd, kTolF32);
      if (!norm.rms) {
        EXPECT_CLOSE(download_wide(mean, N), ref_mean, kTolF32);
      }

      // Fused with a residual add of zeros: the same bits as the plain forward.
      BF16* residual = poisoned<BF16>(N * C);
      BF16* fused = poisoned<BF16>(N * C);
      float* fused_rstd = poisoned<float>(N);
      fused_residual_layernorm_forward(residual, fused, norm.rms ? nullptr : poisoned<float>(N),
                                       fused_rstd, x_d, upload(std::vector<BF16>(N * C)), w_d,
                                       nullptr, N, C, norm);
      const auto o1 = download(out, N * C), o2 = download(fused, N * C);
      EXPECT_EQ(std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(BF16)), 0);
      EXPECT_EQ(download(fused_rstd, N), download(rstd, N));

      const auto dy = round16(random(N * C));
      const auto dx0 = round16(random(N * C));
      const Floats dw0 = random(C);
      BF16* dx = upload(dx0);
      float* dw = upload(dw0);
      layernorm_backward(*ctx_, dx, dw, nullptr, upload(dy), x_d, w_d, mean, rstd, N, C, norm);
      const Doubles dev_mean = norm.rms ? Doubles() : download_wide(mean, N);
      const Doubles dev_rstd = download_wide(rstd, N);
      Doubles ref_dx = widen(dx0), ref_dw = widen(dw0);
      ref::layernorm_backward(ref_dx.data(), ref_dw.data(), nullptr, widen(dy).data(),
                              widen(x).data(), widen(w).data(),
                              norm.rms ? nullptr : dev_mean.data(), dev_rstd.data(), N, C, norm);
      EXPECT_CLOSE(download_wide(dx, N * C), ref_dx, kTol16);
      EXPECT_CLOSE(download_wide(dw, C), ref_dw, kTolF32);
    }
  }
}

TEST_F(CudaKernels, SwigluForwardAndBackward) {
  const int N = 131, F = 77;
  const auto inp = round16(random(N * 2 * F, -6.f, 6.f));
  const auto dy = round16(random(N * F));
  BF16* inp_d = upload(inp);
  BF16* out = poisoned<BF16>(N * F);
  swiglu_forward(out, inp_d, N, F);
  Doubles ref_out(N * F);
  ref::swiglu_forward(ref_out.data(), widen(inp).data(), N, F);
  EXPECT_CLOSE(download_wide(out, N * F), ref_out, kTol16);
  BF16* dinp = poisoned<BF16>(N * 2 * F);
  swiglu_backward(dinp, upload(dy), inp_d, N, F);
  Doubles ref_dinp(N * 2 * F);
  ref::swiglu_backward(ref_dinp.data(), widen(dy).data(), widen(inp).data(), N, F);
  EXPECT_CLOSE(download_wide(dinp, N * 2 * F), ref_dinp, kTol16);
}

// In place on q and k, v untouched; the inverse undoes it and is the reference's backward. B = 5
// spans two blocks of rows; T = 67 positions.
TEST_F(CudaKernels, RopeRotatesQAndKAndItsInverseIsTheBackward) {
  const int B = 5, T = 67, NH = 4, NKV = 2, HS = 128;
  const int W = (NH + 2 * NKV) * HS, QK = (NH + NKV) * HS;
  const int64_t n = static_cast<int64_t>(B) * T * W;
  const auto x = round16(random(n, -2.f, 2.f));
  BF16* y = upload(x);
  rope(y, B, T, NH, NKV, HS, 10000.f, false);
  Doubles ref_y = widen(x);
  ref::rope(ref_y.data(), B, T, NH, NKV, HS, 10000.0, false);
  const auto got = download(y, n);
  EXPECT_CLOSE(columns(widen(got), B * T, W, 0, QK), columns(ref_y, B * T, W, 0, QK), kTol16);
  for (int64_t r = 0; r < int64_t{B} * T; ++r) {
    for (int c = QK; c < W; ++c) ASSERT_EQ(got[r * W + c].bits, x[r * W + c].bits) << "v rotated";
  }
  rope(y, B, T, NH, NKV, HS, 10000.f, true);
  EXPECT_CLOSE(download_wide(y, n), widen(x), kTol16);
  const auto dy = round16(random(n));
  BF16* dx = upload(dy);
  rope(dx, B, T, NH, NKV, HS, 10000.f, true);
  Doubles ref_dx = widen(dy);
  ref::rope(ref_dx.data(), B, T, NH, NKV, HS, 10000.0, true);
  EXPECT_CLOSE(download_wide(dx, n), ref_dx, kTol16);
}

struct LinearShape {
  int N, IC, OC;
};
// Aligned (cuBLASLt's fused epilogues) and odd (the separate-kernel fallback) shapes.
constexpr LinearShape kLinearShapes[] = {{256, 128, 192}, {67, 77, 129}};

TEST_F(CudaKernels, LinearForwardWithBiasAndGelu) {
  for (const LinearShape s : kLinearShapes) {
    const auto x = round16(random(s.N * s.IC));
    const auto w = round16(random(s.OC * s.IC));
    const auto b = round16(random(s.OC));
    for (const bool with_bias : {true, false}) {
      for (const bool with_gelu : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "N=" << s.N << " IC=" << s.IC << " OC=" << s.OC
                                          << " bias=" << with_bias << " gelu=" << with_gelu);
        BF16* out = poisoned<BF16>(s.N * s.OC);
        BF16* pre = with_gelu ? poisoned<BF16>(s.N * s.OC) : nullptr;
        linear_forward(*ctx_, out, pre, upload(x), upload(w), with_bias ? upload(b) : nullptr, s.N,
                       s.IC, s.OC);
        Doubles ref_pre(s.N * s.OC);
        const Doubles bias = widen(b);
        ref::matmul_forward(ref_pre.data(), widen(x).data(), widen(w).data(),
                            with_bias ? bias.data() : nullptr, s.N, s.IC, s.OC);
        Doubles ref_out = ref_pre;
        if (with_gelu) {
          ref::gelu_forward(ref_out.data(), ref_pre.data(), s.N * s.OC);
          EXPECT_CLOSE(download_wide(pre, s.N * s.OC), ref_pre, kTol16);
        }
        EXPECT_CLOSE(download_wide(out, s.N * s.OC), ref_out, kTol16);
      }
    }
  }
}

TEST_F(CudaKernels, LinearBackwardThroughGeluIntoEachGradient) {
  for (const LinearShape s : kLinearShapes) {
    const auto x = round16(random(s.N * s.IC));
    const auto w = round16(random(s.OC * s.IC));
    const auto dy = round16(random(s.N * s.OC));
    const auto pre = round16(random(s.N * s.IC, -3.f, 3.f));
    const Floats dw0 = random(s.OC * s.IC), db0 = random(s.OC);
    for (const bool with_gelu : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << "N=" << s.N << " IC=" << s.IC << " OC=" << s.OC << " gelu=" << with_gelu);
      BF16* dx = poisoned<BF16>(s.N * s.IC);
      float* dw = upload(dw0);
      float* db = upload(db0);
      linear_backward(*ctx_, dx, dw, db, upload(dy), upload(x), upload(w),
                      with_gelu ? upload(pre) : nullptr, s.N, s.IC, s.OC);
      Doubles ref_dx(s.N * s.IC, 0.0), ref_dw = widen(dw0), ref_db = widen(db0);
      ref::matmul_backward(ref_dx.data(), ref_dw.data(), ref_db.data(), widen(dy).data(),
                           widen(x).data(), widen(w).data(), s.N, s.IC, s.OC);
      if (with_gelu) {
        Doubles through(s.N * s.IC, 0.0);
        ref::gelu_backward(through.data(), widen(pre).data(), ref_dx.data(), s.N * s.IC);
        ref_dx = through;
      }
      EXPECT_CLOSE(download_wide(dx, s.N * s.IC), ref_dx, kTol16);
      EXPECT_CLOSE(download_wide(dw, s.OC * s.IC), ref_dw, kTolF32);
      EXPECT_CLOSE(download_wide(db, s.OC), ref_db, kTolF32);
    }
  }
}

TEST_F(CudaKernels, ResidualAddRoundsOnce) {
  const int64_t n = 100003;
  const auto x = round16(random(n, -4.f, 4.f));
  const auto y = round16(random(n));
  BF16* sum = poisoned<BF16>(n);
  residual_forward(sum, upload(x), upload(y), n);
  Doubles ref(n);
  ref::residual_forward(ref.data(), widen(x).data(), widen(y).data(), n);
  EXPECT_CLOSE(download_wide(sum, n), ref, kTol16);
}

struct AttentionShape {
  int B, T, NH, HS, NKV;
  int C() const { return NH * HS; }
  int W() const { return (NH + 2 * NKV) * HS; }  // qkv's row width
};
// One partial tile (T=67), several tiles with a partial last one (T=300), both head sizes;
// grouped-query: 2 and 4 query heads per key/value head, and multi-query.
constexpr AttentionShape kAttentionShapes[] = {{2, 67, 2, 64, 2},
                                               {2, 300, 2, 64, 2},
                                               {1, 300, 2, 128, 2},
                                               {2, 300, 4, 64, 2},
                                               {1, 67, 4, 128, 1}};

TEST_F(CudaKernels, FlashAttentionForwardMatchesReference) {
  for (const AttentionShape s : kAttentionShapes) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                      << " HS=" << s.HS << " NKV=" << s.NKV);
    const int C = s.C(), W = s.W();
    const auto qkv = round16(random(s.B * s.T * W, -2.f, 2.f));
    BF16* out = poisoned<BF16>(s.B * s.T * C);
    float* lse = poisoned<float>(s.B * s.NH * s.T);
    flash_attention_forward(out, lse, upload(qkv), s.B, s.T, C, s.NH, s.NKV);
    Doubles ref_out(s.B * s.T * C), att(static_cast<size_t>(s.B) * s.NH * s.T * s.T);
    const Doubles q = widen(qkv);
    ref::attention_forward(ref_out.data(), att.data(), q.data(), s.B, s.T, C, s.NH, s.NKV);
    EXPECT_CLOSE(download_wide(out, s.B * s.T * C), ref_out, kTol16);
    // lse[b,h,t] = log sum_j<=t exp(q_t . k_j / sqrt(HS)), k of h's key/value head
    Doubles ref_lse(s.B * s.NH * s.T);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.HS));
    for (int b = 0; b < s.B; ++b) {
      for (int h = 0; h < s.NH; ++h) {
        const int g = h / (s.NH / s.NKV);
        for (int t = 0; t < s.T; ++t) {
          double sum = 0.0;
          const double* qt = q.data() + (static_cast<int64_t>(b) * s.T + t) * W + h * s.HS;
          for (int j = 0; j <= t; ++j) {
            const double* kj = q.data() + (static_cast<int64_t>(b) * s.T + j) * W + C + g * s.HS;
            double dot = 0.0;
            for (int d = 0; d < s.HS; ++d) dot += qt[d] * kj[d];
            sum += std::exp(dot * scale);
          }
          ref_lse[(b * s.NH + h) * s.T + t] = std::log(sum);
        }
      }
    }
    EXPECT_CLOSE(download_wide(lse, s.B * s.NH * s.T), ref_lse, kTolF32);
  }
}

TEST_F(CudaKernels, FlashAttentionBackwardMatchesReferenceAndRepeats) {
  for (const AttentionShape s : kAttentionShapes) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " NH=" << s.NH
                                      << " HS=" << s.HS << " NKV=" << s.NKV);
    const int C = s.C(), W = s.W(), KV = s.NKV * s.HS;
    const int64_t rows = static_cast<int64_t>(s.B) * s.T;
    const auto qkv = round16(random(rows * W, -2.f, 2.f));
    const auto dy = round16(random(rows * C));
    BF16* qkv_d = upload(qkv);
    BF16* dy_d = upload(dy);
    BF16* out = poisoned<BF16>(rows * C);
    float* lse = poisoned<float>(s.B * s.NH * s.T);
    flash_attention_forward(out, lse, qkv_d, s.B, s.T, C, s.NH, s.NKV);
    BF16* dqkv = poisoned<BF16>(rows * W);
    flash_attention_backward(*ctx_, dqkv, dy_d, qkv_d, out, lse, s.B, s.T, C, s.NH, s.NKV);

    Doubles ref_out(rows * C), att(static_cast<size_t>(s.B) * s.NH * s.T * s.T);
    ref::attention_forward(ref_out.data(), att.data(), widen(qkv).data(), s.B, s.T, C, s.NH, s.NKV);
    Doubles ref_dqkv(rows * W, 0.0);
    ref::attention_backward(ref_dqkv.data(), widen(dy).data(), widen(qkv).data(), att.data(), s.B,
                            s.T, C, s.NH, s.NKV);
    const auto got = download(dqkv, rows * W);
    const Doubles wide = widen(got);
    // dq, dk, dv separately: each has its own kernel path (dk and dv sum a group's heads).
    const int64_t from[] = {0, C, C + KV}, width[] = {C, KV, KV};
    for (const int part : {0, 1, 2}) {
      EXPECT_CLOSE(columns(wide, rows, W, from[part], width[part]),
                   columns(ref_dqkv, rows, W, from[part], width[part]), kTol16)
          << "part "
          << "qkv"[part];
    }
    BF16* again = poisoned<BF16>(rows * W);
    flash_attention_backward(*ctx_, again, dy_d, qkv_d, out, lse, s.B, s.T, C, s.NH, s.NKV);
    const auto repeat = download(again, rows * W);
    EXPECT_EQ(std::memcmp(repeat.data(), got.data(), got.size() * sizeof(BF16)), 0)
        << "not deterministic";
  }
}

TEST_F(CudaKernels, SoftmaxCrossEntropyFusedOnBf16Logits) {
  const int N = 67, V = 1001, Vp = 1024;
  const auto logits = round16(random(N * Vp, -5.f, 5.f));
  auto targets = random_tokens(N, V);
  targets[5] = -1;
  const float dloss = 1.f / N;
  float* losses = poisoned<float>(N);
  BF16* grad = upload(logits);
  softmax_cross_entropy_fused(losses, grad, upload(targets), dloss, N, V, Vp);
  Doubles ref_losses(N);
  Doubles ref_grad = widen(logits);
  ref::softmax_cross_entropy_fused(ref_losses.data(), ref_grad.data(), targets.data(), dloss, N, V,
                                   Vp);
  EXPECT_CLOSE(download_wide(losses, N), ref_losses, kTolF32);
  const auto g = download(grad, N * Vp);
  EXPECT_CLOSE(widen(g), ref_grad, kTol16);
  for (int n = 0; n < N; ++n) {
    for (int j = V; j < Vp; ++j) ASSERT_EQ(g[n * Vp + j].to_float(), 0.f) << "padding, row " << n;
  }
}

TEST_F(CudaKernels, AdamWOverManySegmentsInOneLaunch) {
  const std::vector<int64_t> sizes = {1, 4099, 10007, 8192};
  const std::vector<float> decays = {0.f, 0.1f, 0.f, 0.05f};
  std::vector<Floats> p0, g, m0, v0;
  std::vector<AdamWSegment> segments;
  for (size_t i = 0; i < sizes.size(); ++i) {
    p0.push_back(random(sizes[i]));
    g.push_back(random(sizes[i]));
    m0.push_back(random(sizes[i], -0.1f, 0.1f));
    v0.push_back(random(sizes[i], 0.f, 0.1f));
    BF16* copy = i == 2 ? nullptr : poisoned<BF16>(sizes[i]);  // one without a copy
    segments.push_back(
        {upload(p0[i]), upload(g[i]), upload(m0[i]), upload(v0[i]), copy, sizes[i], decays[i]});
  }
  const AdamWPlan plan(*arena_, segments);
  EXPECT_EQ(plan.num_elements(), 4099 + 10007 + 8192 + 1);
  const float clip = 0.5f;
  plan.step(1e-3f, 0.9f, 0.95f, 1e-8f, 2, clip);
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "segment " << i);
    Floats rp = p0[i], rm = m0[i], rv = v0[i], rg = g[i];
    for (float& x : rg) x *= clip;
    ref::adamw_update(rp.data(), rg.data(), rm.data(), rv.data(), sizes[i], 1e-3f, 0.9f, 0.95f,
                      1e-8f, decays[i], 2);
    const Floats got = download(segments[i].params, sizes[i]);
    EXPECT_CLOSE(widen(got), widen(rp), kTolF32);
    EXPECT_CLOSE(download_wide(segments[i].m, sizes[i]), widen(rm), kTolF32);
    EXPECT_CLOSE(download_wide(segments[i].v, sizes[i]), widen(rv), kTolF32);
    if (segments[i].params16 != nullptr) {
      const auto copy = download(segments[i].params16, sizes[i]);
      for (int64_t j = 0; j < sizes[i]; ++j) {
        ASSERT_EQ(copy[j].bits, BF16::from_float(got[j]).bits) << "copy of element " << j;
      }
    }
  }
}

TEST_F(CudaKernels, SumSquaresIsExactEnoughAndTheSameEveryRun) {
  for (const int64_t n : {int64_t{1}, int64_t{1000003}}) {
    const Floats x = random(n, -3.f, 3.f);
    float* xd = upload(x);
    double* out = poisoned<double>(2);
    sum_squares(*ctx_, out, xd, n);
    sum_squares(*ctx_, out + 1, xd, n);
    const std::vector<double> got = download(out, 2);
    const double want = ref::sum_squares(x.data(), n);
    EXPECT_NEAR(got[0], want, 1e-12 * want) << "n=" << n;
    EXPECT_EQ(got[1], got[0]) << "n=" << n;  // bit-identical
  }
}

}  // namespace
}  // namespace weft::kernels::cuda
