// The H200 preset's GEMM model against rates measured on an H200 (tests/planner/
// h200-kernel-rates-2026-11-30.json, a copy of /work/shared/data's; PyTorch 2.11 / cuBLAS, bf16,
// the four GEMMs of a transformer layer at hidden 1024..12288, tp 1..8, 2048..16384 rows).

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "planner/test_paths.h"
#include "weft/planner/cost_model.h"

namespace weft::planner {
namespace {

TEST(H200Preset, GemmModelMatchesMeasuredRatesForMostShapes) {
  const Cluster c = load_cluster(test::source_path("configs/clusters/h200.toml")).value();
  std::ifstream in(test::source_path("tests/planner/h200-kernel-rates-2026-11-30.json"));
  ASSERT_TRUE(in);
  const nlohmann::json data = nlohmann::json::parse(in);
  int n = 0, within15 = 0, within20 = 0;
  double worst = 0;
  for (const auto& g : data["gemm"]) {
    const int64_t M = g["M"], N = g["N"], K = g["K"];
    const double measured = g["tflops"].get<double>() * 1e12;
    const double t = gemm_time(c, c.peak(NumberFormat::BF16), M, N, K);
    const double predicted = 2.0 * M * N * K / t;
    const double error = std::abs(predicted / measured - 1);
    ++n;
    within15 += error <= 0.15;
    within20 += error <= 0.20;
    worst = std::max(worst, error);
  }
  fmt::print("{} shapes: {:.0f}% within 15%, {:.0f}% within 20%, worst {:.0f}%\n", n,
             100.0 * within15 / n, 100.0 * within20 / n, 100 * worst);
  EXPECT_EQ(n, 240);
  EXPECT_GE(within15, 0.85 * n);
  EXPECT_GE(within20, 0.95 * n);
}

}  // namespace
}  // namespace weft::planner
