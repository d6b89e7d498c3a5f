// parallel.auto's choice (planner/auto_layout.h): on the ranks that are left, the fastest layout
// the trainer accepts that fits in memory, keeping the run's microbatch size and recomputation,
// found in well under a second for a small model; when none runs, an error that says why for
// each process grid.

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "planner/test_paths.h"
#include "weft/layout/validate.h"
#include "weft/planner/auto_layout.h"

namespace weft::planner {
namespace {

#define EXPECT_HAS(haystack, needle)                                                       \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "no '" << (needle) << "' in:\n" \
                                                        << (haystack)

Cluster this_machine() {
  return load_cluster(test::source_path("configs/clusters/this-machine.toml")).value();
}

// The model and batch of tests/runtime/cli_auto_layout_test.cc: 4 layers, 4 heads, 12 sequences
// of 16 tokens a step, micro batches of 2.
Job tiny4(int world, int global_batch = 12) {
  Job j;
  j.model = {.name = "tiny4",
             .n_layer = 4,
             .n_embd = 32,
             .n_head = 4,
             .vocab_size = 61,
             .pad_vocab_to = 16,
             .max_seq_len = 16};
  j.seq_len = 16;
  j.global_batch = global_batch;
  j.world = world;
  j.precision = Precision::FP32;
  return j;
}

constexpr layout::Layout kRun{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 2};

TEST(AutoLayout, TakesTheRanksLeftKeepsMicroBatchAndRecomputeAndIsValid) {
  for (int world : {1, 2, 4, 6, 8}) {
    for (model::Recompute r : {model::Recompute::None, model::Recompute::Full}) {
      layout::Layout run = kRun;
      run.recompute = r;
      const Job job = tiny4(world);
      const auto t0 = std::chrono::steady_clock::now();
      const auto best = auto_layout(this_machine(), job, run);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ASSERT_TRUE(best.ok()) << world << ": " << best.status().message();
      const layout::Layout& l = best.value().config;
      EXPECT_EQ(l.grid().world(), world);
      EXPECT_EQ(l.micro_batch, run.micro_batch);
      EXPECT_EQ(l.recompute, r);
      EXPECT_TRUE(
          layout::validate(job.model, l, {.global_batch = job.global_batch, .seq_len = 16}).ok())
          << layout::to_string(l);
      EXPECT_TRUE(best.value().feasible);
      EXPECT_GT(best.value().time.total, 0);
      EXPECT_LT(seconds, 0.5) << world;  // it runs before every auto launch
    }
  }
}

// The search's own winner among the layouts it may choose: nothing in the space is faster.
TEST(AutoLayout, IsTheFastestOfItsSpace) {
  const Job job = tiny4(6);
  const Cluster cluster = this_machine();
  const auto best = auto_layout(cluster, job, kRun);
  ASSERT_TRUE(best.ok());
  const SearchResult all = search(cluster, job, auto_layout_space(kRun), 1 << 20);
  ASSERT_FALSE(all.ranked.empty());
  EXPECT_EQ(best.value().config, all.ranked.front().config);
  EXPECT_EQ(best.value().time.total, all.ranked.front().time.total);
}

// Memory decides before speed: with a device too small for the fastest layout, the choice is one
// that fits.
TEST(AutoLayout, ALayoutThatFitsBeatsAFasterOneThatDoesNot) {
  const Job job = tiny4(4);
  Cluster cluster = this_machine();
  const Prediction fastest = auto_layout(cluster, job, kRun).value();
  cluster.memory_bytes = fastest.memory.total() * 0.999;
  cluster.reserved_bytes = 0;
  const auto fits = auto_layout(cluster, job, kRun);
  ASSERT_TRUE(fits.ok()) << fits.status().message();
  EXPECT_LE(fits.value().memory.total(), cluster.memory_bytes);
  EXPECT_NE(fits.value().config, fastest.config);
  EXPECT_GE(fits.value().time.total, fastest.time.total);
}

// 3 ranks: tp=3 splits no head of 4, pp=3 no 4 layers, dp=3 no 8 sequences in micro batches of 2.
TEST(AutoLayout, NoLayoutSaysWhyForEachGrid) {
  const auto r = auto_layout(this_machine(), tiny4(3, 8), kRun);
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_HAS(m,
             "tp=1 pp=1 dp=3: train.global_batch=8 is not divisible by train.micro_batch=2 x "
             "parallel.dp=3");
  EXPECT_HAS(m, "tp=1 pp=3 dp=1: ");
  EXPECT_HAS(m, "tp=3 pp=1 dp=1: ");
  EXPECT_HAS(m, "n_head=4 is not divisible by tp=3");
  EXPECT_HAS(m, "start another number of ranks");
}

TEST(AutoLayout, NoLayoutInTheMemorySaysHowMuchEachNeeds) {
  Cluster cluster = this_machine();
  cluster.memory_bytes = 1 << 20;  // 1 MiB a device
  cluster.reserved_bytes = 0;
  const auto r = auto_layout(cluster, tiny4(2), kRun);
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_HAS(m, "tp=1 pp=1 dp=2: needs ");
  EXPECT_HAS(m, "tp=2 pp=1 dp=1: needs ");
  EXPECT_HAS(m, "GiB per device");
}

}  // namespace
}  // namespace weft::planner
