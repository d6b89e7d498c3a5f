// kernels::ProfilingBackend: forwards every op unchanged, and times those run while enabled.
#include <gtest/gtest.h>

#include <vector>

#include "support/backend_ops.h"
#include "weft/core/dtype.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/profiling_backend.h"

namespace weft::kernels {
namespace {

TEST(ProfilingBackend, TimesTheOpsRunWhileEnabledAndChangesNoResult) {
  auto host = make_host_backend(Precision::BF16Mixed);
  ProfilingBackend p(*host);
  const int N = 37, IC = 48, OC = 80;
  std::vector<BF16> x(N * IC), w(OC * IC);
  for (size_t i = 0; i < x.size(); ++i) x[i] = BF16::from_float(0.01f * float(i % 17) - 0.05f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = BF16::from_float(0.02f * float(i % 13) - 0.1f);
  BF16* dx = p.allocate<BF16>(N * IC);
  BF16* dw = p.allocate<BF16>(OC * IC);
  BF16* out = p.allocate<BF16>(N * OC);
  BF16* ref = host->allocate<BF16>(N * OC);
  p.upload(dx, x.data(), N * IC * 2);  // disabled: forwarded, not timed
  p.upload(dw, w.data(), OC * IC * 2);
  EXPECT_TRUE(p.times().empty());

  p.set_enabled(true);
  weft::test::act_op(&kernels::Backend::linear_forward, p, out, nullptr, dx, dw, nullptr, N, IC,
                     OC);
  weft::test::act_op(&kernels::Backend::linear_forward, p, out, nullptr, dx, dw, nullptr, N, IC,
                     OC);
  weft::test::act_op(&kernels::Backend::residual_forward, p, out, out, out, 8);
  p.set_enabled(false);
  weft::test::act_op(&kernels::Backend::linear_forward, p, out, nullptr, dx, dw, nullptr, N, IC,
                     OC);  // not counted
  weft::test::act_op(&kernels::Backend::linear_forward, *host, ref, nullptr, dx, dw, nullptr, N, IC,
                     OC);

  const auto times = p.times();
  ASSERT_EQ(times.size(), 2u);
  for (const auto& t : times) {
    EXPECT_GE(t.seconds, 0.0);
    if (t.op == "linear_forward 48->80 (N=37)") {
      EXPECT_EQ(t.calls, 2);
    } else {
      EXPECT_EQ(t.op, "residual_forward");
      EXPECT_EQ(t.calls, 1);
    }
  }
  std::vector<BF16> a(N * OC), b(N * OC);
  p.download(a.data(), out, N * OC * 2);
  host->download(b.data(), ref, N * OC * 2);
  for (int i = 0; i < N * OC; ++i) ASSERT_EQ(a[i].bits, b[i].bits) << i;
  p.reset();
  EXPECT_TRUE(p.times().empty());
}

}  // namespace
}  // namespace weft::kernels
