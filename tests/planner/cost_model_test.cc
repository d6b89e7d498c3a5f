#include <gtest/gtest.h>

#include <cmath>

#include "planner/test_paths.h"
#include "weft/planner/cost_model.h"

namespace weft::planner {
namespace {

Cluster a100() { return load_cluster(test::source_path("configs/clusters/dgx-a100.toml")).value(); }
Cluster frontier() {
  return load_cluster(test::source_path("configs/clusters/frontier.toml")).value();
}

TEST(GemmModel, OneTileMoreThanAWaveHalvesTheRate) {
  GemmModel g{.compute_units = 108, .tile_m = 128, .tile_n = 128, .efficiency = 1, .k_half = 0};
  // 108 tiles fill one wave exactly; 109 need a second wave that is almost empty.
  EXPECT_DOUBLE_EQ(gemm_shape_efficiency(g, 128 * 108, 128, 4096), 1.0);
  EXPECT_NEAR(gemm_shape_efficiency(g, 128 * 109, 128, 4096), 109.0 / 216, 1e-12);
  // A partial tile wastes its unused rows too.
  EXPECT_NEAR(gemm_shape_efficiency(g, 64, 128, 4096), 64.0 / (108 * 128), 1e-12);
}

TEST(GemmModel, ShortKLosesRateAndTinyGemmsHitTheFloor) {
  const Cluster c = a100();
  const double peak = c.peak(NumberFormat::BF16);
  const double long_k = gemm_time(c, peak, 8192, 8192, 8192) / (2.0 * 8192 * 8192 * 8192);
  const double short_k = gemm_time(c, peak, 8192, 8192, 128) / (2.0 * 8192 * 8192 * 128);
  EXPECT_GT(short_k, 2 * long_k);  // per FLOP
  EXPECT_DOUBLE_EQ(gemm_time(c, peak, 16, 16, 16), c.gemm.min_time);
}

TEST(Collectives, RingAllReduceMovesTwiceTheDataTimesPMinusOneOverP) {
  GroupLink g{.size = 8,
              .span = Span::Node,
              .members_per_node = 8,
              .link = {.bandwidth = 100e9, .latency = 0}};
  const double bytes = 1e9;
  EXPECT_NEAR(collective_time(g, Collective::AllReduce, bytes), 2.0 * 7 / 8 * bytes / 100e9, 1e-12);
  EXPECT_NEAR(collective_time(g, Collective::AllGather, bytes), 7.0 / 8 * bytes / 100e9, 1e-12);
  // An all-reduce costs a reduce-scatter plus an all-gather (sequence parallelism's pair).
  EXPECT_NEAR(collective_time(g, Collective::AllReduce, bytes),
              collective_time(g, Collective::ReduceScatter, bytes) +
                  collective_time(g, Collective::AllGather, bytes),
              1e-12);
  g.size = 1;
  EXPECT_EQ(collective_time(g, Collective::AllReduce, bytes), 0);
}

// A link may say that reduce-scatter and all-gather move their bytes at rates of their own (what
// `weft calibrate` measures on CPU ranks); the all-reduce keeps the link's.
TEST(Collectives, ReduceScatterAndAllGatherUseTheirOwnMeasuredBandwidth) {
  GroupLink g{.size = 2,
              .span = Span::Node,
              .members_per_node = 2,
              .link = {.bandwidth = 5e9,
                       .latency = 0,
                       .reduce_scatter_bandwidth = 10e9,
                       .all_gather_bandwidth = 20e9}};
  const double bytes = 1e8;
  EXPECT_NEAR(collective_time(g, Collective::ReduceScatter, bytes), 0.5 * bytes / 10e9, 1e-12);
  EXPECT_NEAR(collective_time(g, Collective::AllGather, bytes), 0.5 * bytes / 20e9, 1e-12);
  EXPECT_NEAR(collective_time(g, Collective::AllReduce, bytes), bytes / 5e9, 1e-12);
}

TEST(Collectives, SmallMessagesTakeTheLogarithmicAlgorithm) {
  GroupLink g{.size = 64,
              .span = Span::Network,
              .members_per_node = 1,
              .link = {.bandwidth = 25e9, .latency = 5e-6}};
  const double ring = 2.0 * 63 * 5e-6 + 2.0 * 63 / 64 * 8 / 25e9;
  const double t = collective_time(g, Collective::AllReduce, 8);
  EXPECT_LT(t, ring);
  EXPECT_NEAR(t, 2 * 6 * 5e-6 + 2 * 8 / 25e9, 1e-12);
}

TEST(Placement, MegatronOrderKeepsTensorParallelismInsideANode) {
  const Placement p = place(a100(), {.tp = 8, .pp = 8, .dp = 16});
  EXPECT_EQ(p.tp.span, Span::Node);
  EXPECT_EQ(p.dp.span, Span::Network);
  EXPECT_EQ(p.dp.members_per_node, 1);
  EXPECT_DOUBLE_EQ(p.dp.link.bandwidth, 23e9);  // one HCA per GPU
  EXPECT_EQ(p.pp.span, Span::Network);
}

TEST(Placement, ACrossNodeRingGetsTheNicsOfItsMembersOnEachNode) {
  // tp=1, dp=32 over 4 nodes: 8 members per node, 8 HCAs, capped by the node link.
  const Placement p = place(a100(), {.tp = 1, .pp = 1, .dp = 32});
  EXPECT_EQ(p.dp.span, Span::Network);
  EXPECT_EQ(p.dp.members_per_node, 8);
  EXPECT_DOUBLE_EQ(p.dp.link.bandwidth, 8 * 23e9);
}

TEST(Placement, FrontierPairsOfGcdsShareAPackage) {
  const Cluster f = frontier();
  EXPECT_EQ(place(f, {.tp = 2, .pp = 1, .dp = 4}).tp.span, Span::Package);
  EXPECT_EQ(place(f, {.tp = 4, .pp = 1, .dp = 2}).tp.span, Span::Node);
  EXPECT_EQ(place(f, {.tp = 16, .pp = 1, .dp = 1}).tp.span, Span::Network);
  // With tp=2 the pipeline neighbours (2 ranks apart with dp=1) sit on different packages.
  EXPECT_EQ(place(f, {.tp = 2, .pp = 4, .dp = 1}).pp.span, Span::Node);
  EXPECT_GT(f.package.bandwidth, f.node.bandwidth);
}

}  // namespace
}  // namespace weft::planner
