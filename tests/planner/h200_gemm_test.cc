// The H200 preset's GEMM model against rates measured on an H200 (tests/planner/
// h200-kernel-rates-2026-11-30.json, a copy of /work/shared/data's; PyTorch 2.11 / cuBLAS, bf16,
// the four GEMMs of a transformer layer at hidden 1024..12288, tp 1..8, 2048..16384 rows).
//
// The shapes are split by hidden size: the preset's [gemm] constants are fit_gemm_model on the
// 144 shapes of h = 1024, 4096, 12288 (the fitting set), and checked on the 96 of h = 2048, 8192
// (the held-out set), sizes the fit never saw. A split by index would not do: the file lists each
// (h, t, M)'s four GEMMs in turn, so every other shape is qkv/fc1 only, which leaves k_half
// undetermined (fitted on them, k_half = 0 and the held-out proj/fc2 shapes are off by up to 64%).

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/test_paths.h"
#include "weft/core/check.h"
#include "weft/planner/cost_model.h"
#include "weft/planner/gemm_fit.h"

namespace weft::planner {
namespace {

bool in_fitting_set(int64_t h) { return h == 1024 || h == 4096 || h == 12288; }

struct Shapes {
  std::vector<GemmSample> fitting, held_out;
};

Shapes load_shapes() {
  std::ifstream in(test::source_path("tests/planner/h200-kernel-rates-2026-11-30.json"));
  WEFT_CHECK(in, "cannot read the H200 kernel rates");
  const nlohmann::json data = nlohmann::json::parse(in);
  Shapes s;
  for (const auto& g : data["gemm"]) {
    const GemmSample sample{
        .M = g["M"], .N = g["N"], .K = g["K"], .seconds = g["ms"].get<double>() * 1e-3};
    (in_fitting_set(g["h"].get<int64_t>()) ? s.fitting : s.held_out).push_back(sample);
  }
  return s;
}

Cluster h200() { return load_cluster(test::source_path("configs/clusters/h200.toml")).value(); }

struct ErrorStats {
  int n = 0, within15 = 0, within20 = 0;
  double worst = 0, rms = 0;
};

ErrorStats errors(const Cluster& c, const std::vector<GemmSample>& shapes) {
  ErrorStats s;
  for (const GemmSample& x : shapes) {
    // The error as the planner sees it: gemm_time, the function the step model calls.
    const double t = gemm_time(c, c.peak(NumberFormat::BF16), x.M, x.N, x.K);
    const double error = std::abs(x.seconds / t - 1);
    ++s.n;
    s.within15 += error <= 0.15;
    s.within20 += error <= 0.20;
    s.worst = std::max(s.worst, error);
    s.rms += error * error;
  }
  s.rms = std::sqrt(s.rms / s.n);
  fmt::print("{} shapes: {:.1f}% within 15%, {:.1f}% within 20%, worst {:.1f}%, rms {:.1f}%\n", s.n,
             100.0 * s.within15 / s.n, 100.0 * s.within20 / s.n, 100 * s.worst, 100 * s.rms);
  return s;
}

TEST(GemmFit, RecoversTheConstantsOfTimesTheModelGenerated) {
  // Times made by a known model over the measured shapes: the fit must give its constants back.
  GemmModel truth{.compute_units = 132,
                  .tile_m = 128,
                  .tile_n = 256,
                  .efficiency = 0.65,
                  .k_half = 96,
                  .min_time = 12e-6};
  const double peak = 989.4e12;
  Cluster c;
  c.gemm = truth;
  std::vector<GemmSample> synthetic = load_shapes().fitting;
  for (GemmSample& s : synthetic) s.seconds = gemm_time(c, peak, s.M, s.N, s.K);
  const GemmModel fit = fit_gemm_model({.compute_units = 132}, peak, synthetic);
  EXPECT_EQ(fit.tile_m, truth.tile_m);
  EXPECT_EQ(fit.tile_n, truth.tile_n);
  EXPECT_DOUBLE_EQ(fit.k_half, truth.k_half);
  EXPECT_NEAR(fit.min_time, truth.min_time, 1e-12);
  EXPECT_NEAR(fit.efficiency, truth.efficiency, 1e-9);
}

TEST(H200Preset, IsTheFitOnTheFittingShapesOnly) {
  // The preset's [gemm] section must be what the fit gives on the fitting set: refitting the
  // preset on all 240 shapes (or changing a constant by hand) fails here.
  const Cluster c = h200();
  const Shapes shapes = load_shapes();
  ASSERT_EQ(shapes.fitting.size(), 144u);
  ASSERT_EQ(shapes.held_out.size(), 96u);
  const GemmModel fit = fit_gemm_model(c.gemm, c.peak(NumberFormat::BF16), shapes.fitting);
  fmt::print("fit on {} shapes: tile {}x{}, efficiency {:.4f}, k_half {}, min_time {:.0f} us\n",
             shapes.fitting.size(), fit.tile_m, fit.tile_n, fit.efficiency, fit.k_half,
             fit.min_time * 1e6);
  EXPECT_EQ(c.gemm.tile_m, fit.tile_m);
  EXPECT_EQ(c.gemm.tile_n, fit.tile_n);
  EXPECT_DOUBLE_EQ(c.gemm.k_half, fit.k_half);
  EXPECT_NEAR(c.gemm.min_time, fit.min_time, 1e-12);
  EXPECT_NEAR(c.gemm.efficiency, fit.efficiency, 5e-5);  // the preset rounds to 4 decimals
}

TEST(H200Preset, PredictsTheHeldOutShapes) {
  const Cluster c = h200();
  const Shapes shapes = load_shapes();
  fmt::print("fitting set: ");
  errors(c, shapes.fitting);
  fmt::print("held-out set: ");
  const ErrorStats s = errors(c, shapes.held_out);
  ASSERT_EQ(s.n, 96);
  // Measured on the held-out shapes: 88 of 96 within 15%, 95 within 20%, worst 23.6% (attention's
  // proj at h = 2048, t = 8, M = 8192: K = 256, slower than the model predicts), rms 7.5%. The
  // fitting set gives 89.6%, 96.5%, 24.1%, 8.2%: no worse out of sample than in it. Bounds a
  // little above the measured figures (a 20% error in one constant moves the rms past 17%).
  EXPECT_GE(s.within15, 85);
  EXPECT_GE(s.within20, 94);
  EXPECT_LE(s.worst, 0.26);
  EXPECT_LE(s.rms, 0.085);
}

}  // namespace
}  // namespace weft::planner
