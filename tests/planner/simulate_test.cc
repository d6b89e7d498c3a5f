#include <fmt/format.h>
#include <gtest/gtest.h>

#include <tuple>

#include <nlohmann/json.hpp>

#include "planner/test_paths.h"
#include "planner/tune_bench_job.h"
#include "weft/model/gpt_config.h"
#include "weft/planner/report.h"
#include "weft/planner/simulate.h"
#include "weft/schedule/svg.h"

namespace weft::planner {
namespace {

Cluster a100() { return load_cluster(test::source_path("configs/clusters/dgx-a100.toml")).value(); }

Job gpt175b(int gpus, int batch) {
  Job j;
  j.model = model::load_gpt_config(test::source_path("configs/models/gpt-175b.toml")).value();
  j.seq_len = 2048;
  j.global_batch = batch;
  j.world = gpus;
  j.tokens = 300e9;
  return j;
}

TEST(Layout, ParsesTheCommandLineFormAndDerivesDp) {
  const layout::Layout c =
      layout::parse("tp=8,pp=8,vp=2,mb=1,schedule=interleaved,recompute=full,sp=1,zero=1", 1024)
          .value();
  EXPECT_EQ(c.dp, 16);
  EXPECT_EQ(c.vp, 2);
  EXPECT_EQ(c.schedule, schedule::Kind::Interleaved);
  EXPECT_EQ(c.recompute, model::Recompute::Full);
  EXPECT_TRUE(c.sequence_parallel);
  EXPECT_EQ(c.zero, 1);
  EXPECT_EQ(layout::parse(to_string(c), 1024).value(), c);
}

TEST(Layout, TyposAndBadValuesAreAllReported) {
  const Result<layout::Layout> r = layout::parse("tq=8,pp=x,recompute=most", 64);
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("unknown key 'tq' (did you mean 'tp'?)"), std::string::npos) << m;
  EXPECT_NE(m.find("pp=x must be an integer"), std::string::npos) << m;
  EXPECT_NE(m.find("recompute=most must be none, selective or full"), std::string::npos) << m;
}

TEST(Verdict, AConfigurationThatCannotRunSaysWhyInTheUsersTerms) {
  const Job j = gpt175b(1024, 1536);
  const Prediction p = predict(a100(), j, {.tp = 16, .pp = 5, .dp = 12, .micro_batch = 1});
  EXPECT_FALSE(p.feasible);
  const std::string all = fmt::format("{}", fmt::join(p.reasons, "\n"));
  EXPECT_NE(all.find("tp*pp*dp = 16*5*12 = 960 does not equal the world size 1024"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("n_layer=96 does not split into pp*vp = 5*1 = 5 stages"), std::string::npos)
      << all;
}

TEST(Verdict, TooLargeForTheDeviceSaysHowMuchItNeeds) {
  // 175B on 8 pipeline stages without tensor parallelism: 22B parameters per GPU.
  const Job j = gpt175b(1024, 1536);
  const Prediction p = predict(a100(), j, {.tp = 1, .pp = 8, .dp = 128, .micro_batch = 1});
  ASSERT_FALSE(p.feasible);
  EXPECT_TRUE(p.reasons.front().starts_with("needs ")) << p.reasons.front();
  EXPECT_NE(p.reasons.front().find(" GiB per device, has 80 (76.0 usable)"), std::string::npos)
      << p.reasons.front();
}

TEST(Verdict, APrecisionTheClusterHasNoPeakForIsRejected) {
  Cluster cpu = a100();
  cpu.name = "cpu";
  cpu.peak_bf16 = cpu.peak_fp16 = 0;
  const Prediction p = predict(cpu, gpt175b(1024, 1536), {.tp = 8, .pp = 8, .dp = 16});
  ASSERT_FALSE(p.feasible);
  EXPECT_EQ(
      p.reasons.back(),
      "cluster cpu gives no peak rate for bf16-mixed (its [peak_tflops] lacks bf16 and fp16)");
}

TEST(Simulate, TheBreakdownAddsUpToTheSimulatedStep) {
  const Job j = gpt175b(1024, 1536);
  const layout::Layout c{.tp = 8,
                         .pp = 8,
                         .dp = 16,
                         .vp = 2,
                         .micro_batch = 1,
                         .schedule = schedule::Kind::Interleaved,
                         .recompute = model::Recompute::Full};
  Options o;
  o.keep_timeline = true;
  const Simulation sim = simulate_config(a100(), j, c, o);
  const Prediction& p = sim.prediction;
  ASSERT_TRUE(p.feasible) << p.reasons.front();
  const StepBreakdown& t = p.time;
  EXPECT_NEAR(t.compute + t.bubble + t.tp_comm + t.pp_comm + t.dp_comm + t.optimizer, t.total,
              1e-9 * t.total);
  EXPECT_GT(t.bubble, 0);
  EXPECT_GT(t.tp_comm, 0);
  EXPECT_GT(p.mfu, 0.2);
  EXPECT_LT(p.mfu, 0.7);
  EXPECT_GT(p.days, 1);
  // The in-flight counts are the interleaved schedule's (docs/schedules.md §3): rank 0 holds
  // 2(p-1) + (v-1)p + 1 = 23 (stage, microbatch) pairs.
  EXPECT_EQ(p.in_flight.front(), 23);
  EXPECT_EQ(sim.timeline.ranks.size(), 8u);
}

TEST(Simulate, ScatterGatherShrinksTheExposedPipelineMessages) {
  const Job j = gpt175b(1024, 1536);
  const layout::Layout c{.tp = 8,
                         .pp = 8,
                         .dp = 16,
                         .vp = 2,
                         .micro_batch = 1,
                         .schedule = schedule::Kind::Interleaved,
                         .recompute = model::Recompute::Full};
  const Prediction whole = predict(a100(), j, c);
  Options o;
  o.pp_scatter_gather = true;
  const Prediction split = predict(a100(), j, c, o);
  EXPECT_LT(split.time.pp_comm, whole.time.pp_comm);
  EXPECT_LT(split.time.total, whole.time.total);
  EXPECT_DOUBLE_EQ(split.time.compute, whole.time.compute);
}

// Cluster::weight_passes (hardware.h): each linear layer's GEMM call passes over its weight-sized
// operand once more (forward: W, input gradient: W, weight gradient: dW), whatever its rows, so a
// step pays it once per microbatch. The bench's model (bench/tune/run.sh: L=4, C=256, Vp=4096),
// fp32, counted by hand: per microbatch 3 passes x (L x 12 C^2 + Vp x C) x 4 bytes, on a tp rank
// 1/tp of it (its share of every weight and of the vocabulary).
TEST(Simulate, WeightPassesArePaidOncePerMicrobatchOverTheRanksWeights) {
  Cluster c = load_cluster(test::source_path("configs/clusters/this-machine.toml")).value();
  c.compute_scale = 1;
  c.step_overhead = 0;
  c.weight_passes = 0;
  const Job j = test::tune_bench_job();
  const double weights = 4 * 12.0 * 256 * 256 + 4096.0 * 256;  // the linears and the tied wte
  const double per_microbatch = 3 * weights * 4 / (c.memory_bandwidth * c.memory_efficiency);
  Cluster passes = c;
  passes.weight_passes = 1.5;
  for (const auto& [text, microbatches, tp] :
       {std::tuple{"tp=1,dp=2,mb=1", 4, 1}, std::tuple{"tp=1,dp=2,mb=4", 1, 1},
        std::tuple{"tp=2,dp=1,mb=1", 8, 2}, std::tuple{"tp=2,dp=1,mb=8", 1, 2}}) {
    const layout::Layout cfg = layout::parse(text, j.world).value();
    const double extra = predict(passes, j, cfg).time.total - predict(c, j, cfg).time.total;
    EXPECT_NEAR(extra, 1.5 * microbatches * per_microbatch / tp, 1e-9 * extra) << text;
  }
  // Absent from a preset, the passes cost nothing: today's prices, even with no memory bandwidth.
  c.memory_bandwidth = 0;
  EXPECT_EQ(weight_pass_time(c, 1e9), 0);
}

// Cluster::tp_collective_overhead (hardware.h): each tensor-parallel collective of a step costs it
// once. Counted by hand for the bench's model (L=4): per microbatch, each layer's forward and
// input-gradient pass 2 all-reduces each (with sequence parallelism 2 all-gathers and 2
// reduce-scatters each), the embedding's output 1 all-reduce (sp: a reduce-scatter, and an
// all-gather of its gradient), the head's cross-entropy statistics 1 all-gather and its input
// gradient 1 all-reduce (sp: a reduce-scatter): 4 x 4 + 1 + 2 = 19, with sp 4 x 8 + 2 + 2 = 36;
// full recomputation runs each layer's forward again, its 4 collectives (sp) with it; selective
// recomputation none. Without tensor parallelism there is none.
TEST(Simulate, TheTensorParallelCollectivesCostIsPaidOncePerCollective) {
  Cluster c = load_cluster(test::source_path("configs/clusters/this-machine.toml")).value();
  c.tp_collective_overhead = 0;
  Cluster meeting = c;
  meeting.tp_collective_overhead = 100e-6;
  const Job j = test::tune_bench_job();
  for (const auto& [text, collectives] :
       {std::tuple{"tp=1,dp=2,mb=4", 0}, std::tuple{"pp=2,mb=4,schedule=zb-h1", 0},
        std::tuple{"tp=2,mb=8", 19}, std::tuple{"tp=2,mb=4", 2 * 19},
        std::tuple{"tp=2,mb=8,sp=1", 36}, std::tuple{"tp=2,mb=2,sp=1,recompute=selective", 4 * 36},
        std::tuple{"tp=2,mb=8,sp=1,recompute=full", 36 + 4 * 4}}) {
    const layout::Layout cfg = layout::parse(text, j.world).value();
    const double extra = predict(meeting, j, cfg).time.total - predict(c, j, cfg).time.total;
    EXPECT_NEAR(extra, collectives * 100e-6, 1e-9) << text;
  }
}

TEST(Report, TheChromeTraceHasOneTrackPerPipelineRank) {
  const Job j = gpt175b(64, 64);
  const layout::Layout c{
      .tp = 8, .pp = 4, .dp = 2, .micro_batch = 1, .recompute = model::Recompute::Full};
  Options o;
  o.keep_timeline = true;
  const Simulation sim = simulate_config(a100(), j, c, o);
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(sim.timeline, "t"));
  std::set<int> tracks;
  int forwards = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      tracks.insert(e["tid"].get<int>());
      forwards += e["cat"] == "forward";
      EXPECT_GT(e["dur"].get<double>(), 0);
    }
  }
  EXPECT_EQ(tracks, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(forwards, 4 * 32);  // every rank runs m = 64/2 forwards
  EXPECT_NE(schedule::render_svg(sim.timeline, "t").find("<svg"), std::string::npos);
}

}  // namespace
}  // namespace weft::planner
