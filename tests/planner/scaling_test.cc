// Scaling studies (planner/scaling.h): with free links a fixed layout scales weakly at 100%;
// strong scaling of a fixed batch on a fixed pipeline loses what its growing bubble costs
// (1F1B: m / (m + p - 1) of the work per step is useful); the searched study and bad sizes.

#include <gtest/gtest.h>

#include "planner/test_paths.h"
#include "weft/core/check.h"
#include "weft/model/gpt_config.h"
#include "weft/planner/report.h"
#include "weft/planner/scaling.h"

namespace weft::planner {
namespace {

Cluster preset(const std::string& name) {
  return load_cluster(test::source_path("configs/clusters/" + name + ".toml")).value();
}

// A100 nodes whose links cost nothing: every loss of efficiency is the schedule's own.
Cluster free_links() {
  Cluster c = preset("dgx-a100");
  for (Link* l : {&c.package, &c.node, &c.network}) *l = {.bandwidth = 1e30, .latency = 0};
  return c;
}

Job gpt(const std::string& model, int batch) {
  Job j;
  j.model = model::load_gpt_config(test::source_path("configs/models/" + model + ".toml")).value();
  j.seq_len = j.model.max_seq_len;
  j.global_batch = batch;
  return j;
}

layout::Layout layout(const std::string& text, int world) {
  return layout::parse(text, world).value();
}

TEST(Scaling, AFixedLayoutScalesWeaklyAtOneHundredPercentOnFreeLinks) {
  const Cluster c = free_links();
  const ScalingStudy s = scaling_study(c, gpt("gpt2-350m", 16), ScalingMode::Weak, {8, 16, 64, 256},
                                       layout("tp=2,pp=2,mb=2", 8));
  std::printf("%s", format_scaling(s, c, gpt("gpt2-350m", 16)).c_str());
  ASSERT_EQ(s.points.size(), 4u);
  for (const ScalingPoint& p : s.points) {
    ASSERT_TRUE(p.feasible) << p.why;
    EXPECT_EQ(p.global_batch, 16 * p.devices / 8);  // the batch grows with the devices
    EXPECT_EQ(p.best.config.dp, p.devices / 4);     // dp grows, tp and pp stay
    // Measured: 100.0% at every size (the optimizer shard and the bubble per device stay).
    EXPECT_NEAR(p.efficiency, 1.0, 1e-3) << p.devices;
  }
  // On the real links the data-parallel reduction crosses nodes from 16 devices on: < 100%.
  const ScalingStudy real = scaling_study(preset("dgx-a100"), gpt("gpt2-350m", 16),
                                          ScalingMode::Weak, {8, 256}, layout("tp=2,pp=2,mb=2", 8));
  EXPECT_LT(real.points.back().efficiency, 0.99);
}

TEST(Scaling, StrongScalingOfAFixedBatchLosesWhatTheBubbleGrows) {
  const Cluster c = free_links();
  const Job job = gpt("gpt2-350m", 64);
  // pp=4, 1F1B, b=1: m = 64 / dp microbatches = 64, 16, 4 at 4, 16, 64 devices.
  const ScalingStudy s =
      scaling_study(c, job, ScalingMode::Strong, {4, 16, 64}, layout("pp=4,mb=1,schedule=1f1b", 4));
  std::printf("%s", format_scaling(s, c, job).c_str());
  ASSERT_EQ(s.points.size(), 3u);
  const int p = 4;
  const double useful_first = 64.0 / (64 + p - 1);
  for (const ScalingPoint& pt : s.points) {
    ASSERT_TRUE(pt.feasible) << pt.why;
    EXPECT_EQ(pt.global_batch, 64);  // the batch stays
    const int m = 64 / pt.best.config.dp;
    const double expected = (m / (m + p - 1.0)) / useful_first;
    // Measured: 100.0%, 89.9%, 63.9% against 100%, 88.2%, 59.8% from m/(m+p-1) alone
    // (+0.017, +0.041): the last stage's head makes the pipeline uneven, and the fill and drain
    // then wait on the lighter stages, less than (p-1) of the busiest one. Never below the
    // formula; above it by at most ~1.5x the measured gap.
    EXPECT_GE(pt.efficiency, expected - 1e-3) << "m=" << m;
    EXPECT_LE(pt.efficiency, expected + 0.06) << "m=" << m;
  }
  EXPECT_GT(s.points[0].efficiency, s.points[1].efficiency);
  EXPECT_GT(s.points[1].efficiency, s.points[2].efficiency);
  EXPECT_LT(s.points[2].efficiency, 0.7);
}

TEST(Scaling, TheSearchedStudyPicksALayoutAtEachSize) {
  const Cluster c = preset("dgx-a100");
  const Job job = gpt("gpt2-1.5b", 64);
  const ScalingStudy s = scaling_study(c, job, ScalingMode::Weak, {8, 32});
  std::printf("%s", format_scaling(s, c, job).c_str());
  ASSERT_TRUE(s.points[0].feasible && s.points[1].feasible);
  EXPECT_EQ(s.points[0].efficiency, 1.0);
  EXPECT_EQ(s.points[1].global_batch, 256);
  EXPECT_EQ(s.points[1].best.config.tp * s.points[1].best.config.pp * s.points[1].best.config.dp,
            32);
  EXPECT_NEAR(s.points[1].tokens_per_s_per_device, s.points[1].best.tokens_per_s / 32,
              1e-9 * s.points[1].best.tokens_per_s);
  // The search can only do better than any one layout held fixed.
  const ScalingStudy fixed = scaling_study(c, job, ScalingMode::Weak, {8, 32},
                                           layout(to_string(s.points[0].best.config), 8));
  EXPECT_GE(s.points[1].tokens_per_s_per_device,
            fixed.points[1].tokens_per_s_per_device * (1 - 1e-9));
}

TEST(Scaling, BadSizesAreErrorsAndAnIndivisibleSizeSaysWhy) {
  const Cluster c = free_links();
  const Job job = gpt("gpt2-350m", 16);
  EXPECT_THROW(scaling_study(c, job, ScalingMode::Weak, {}), Error);
  EXPECT_THROW(scaling_study(c, job, ScalingMode::Weak, {16, 8}), Error);
  EXPECT_THROW(scaling_study(c, job, ScalingMode::Weak, {0, 8}), Error);
  const ScalingStudy s =
      scaling_study(c, job, ScalingMode::Strong, {8, 12, 16}, layout("tp=8,mb=1", 8));
  EXPECT_TRUE(s.points[0].feasible);
  EXPECT_FALSE(s.points[1].feasible);
  EXPECT_EQ(s.points[1].why, "12 devices are not divisible by tp*pp = 8");
  EXPECT_TRUE(s.points[2].feasible);
  EXPECT_TRUE(parse_scaling_mode("weak").ok());
  EXPECT_FALSE(parse_scaling_mode("weakly").ok());
}

}  // namespace
}  // namespace weft::planner
