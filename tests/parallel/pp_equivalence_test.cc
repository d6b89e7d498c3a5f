// Pipeline parallelism (with tensor parallelism when the world allows) against the serial model:
// every schedule kind, vp in {1, 2}, m in {4, 8}, 10 AdamW steps of a tiny GPT: every loss within
// 1e-5 relative of the serial run. mpirun -n 2: pp=2; -n 4: pp=4, and pp=2 x tp=2.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/mpi_test.h"
#include "support/tiny_gpt.h"
#include "weft/core/rng.h"
#include "weft/model/gpt.h"
#include "weft/parallel/groups.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/runtime/train_step.h"
#include "weft/schedule/schedule.h"

namespace weft {
namespace {

// 8 layers: pp*vp = 8 stages of one layer at pp=4, vp=2; C=64: a boundary message of
// B*T*C = 2048 floats, above Open MPI's eager limit.
model::GptConfig tiny() { return test::tiny_gpt(8, 64); }

constexpr int kB = 2, kT = 16, kSteps = 10;

std::vector<int32_t> batch(int step, int n) {
  std::vector<int32_t> t(n);
  const uint64_t key = stream_key(11, "pp_equivalence.tokens");
  for (int i = 0; i < n; ++i) {
    t[i] = static_cast<int32_t>(uniform_at(key, uint64_t(step) * n + i) * 61) % 61;
  }
  return t;
}

std::vector<float> serial_losses(int m) {
  model::Gpt g(tiny(), kB, kT);
  g.init(99);
  runtime::DistributedOptimizer opt(g, nullptr, 0);
  std::vector<float> out;
  const int n = m * kB * kT;
  for (int s = 0; s < kSteps; ++s) {
    const auto t = batch(s, n + 1);
    out.push_back(runtime::train_step(g, opt, t.data(), t.data() + 1, kB, kT, m, 1e-3f, 1.0).loss);
  }
  return out;
}

struct Case {
  schedule::Kind kind;
  int vp, m;
};

void expect_pipeline_equals_serial(int pp, bool sequence_parallel) {
  comm::Communicator& world = test::test_world();
  if (world.size() % pp != 0) GTEST_SKIP() << "pp=" << pp << " does not divide the world";
  const int tp = world.size() / pp;
  const parallel::Topology topo({.tp = tp, .pp = pp, .dp = 1});
  parallel::ProcessGroups groups = parallel::make_groups(world, topo);
  const int pp_rank = topo.coord(world.rank()).pp;
  using schedule::Kind;
  const std::vector<Case> cases = {{Kind::GPipe, 1, 4},       {Kind::OneFOneB, 1, 4},
                                   {Kind::OneFOneB, 1, 8},    {Kind::ZeroBubbleH1, 1, 8},
                                   {Kind::Interleaved, 2, 4}, {Kind::Interleaved, 2, 8},
                                   {Kind::GPipe, 2, 8}};
  for (int m : {4, 8}) {
    const std::vector<float> serial = serial_losses(m);
    for (const Case& c : cases) {
      if (c.m != m) continue;
      auto made = schedule::make_schedule(c.kind, {.pp = pp, .vp = c.vp, .microbatches = m});
      if (!made.ok()) continue;  // e.g. a kind without chunks at vp=2
      const schedule::Schedule s =
          schedule::add_optimizer_step(schedule::add_communication(std::move(made).value()));
      ASSERT_TRUE(schedule::validate(s).ok()) << schedule::validate(s).message();
      runtime::PipelineOptions o;
      o.B = kB;
      o.T = kT;
      o.tp = {groups.tp.get(), sequence_parallel};
      o.pp = groups.pp.get();
      o.pp_rank = pp_rank;
      o.groups = {groups.model.get(), groups.embedding.get()};
      runtime::PipelineRunner runner(tiny(), s, o);
      runner.init(99);
      const int n = m * kB * kT;
      for (int step = 0; step < kSteps; ++step) {
        const auto t = batch(step, n + 1);
        const float loss = runner.step(t.data(), t.data() + 1, 1e-3f, 1.0).loss;
        EXPECT_NEAR(loss, serial[step], 1e-5 * serial[step])
            << schedule::kind_name(c.kind) << " pp=" << pp << " vp=" << c.vp << " m=" << m
            << " tp=" << tp << " sp=" << sequence_parallel << " step " << step;
      }
    }
  }
}

TEST(PipelineParallel, Pp2TrainsLikeTheSerialModel) { expect_pipeline_equals_serial(2, false); }
TEST(PipelineParallel, Pp2WithSequenceParallelTpTrainsLikeTheSerialModel) {
  expect_pipeline_equals_serial(2, true);
}
TEST(PipelineParallel, Pp4TrainsLikeTheSerialModel) { expect_pipeline_equals_serial(4, false); }

}  // namespace
}  // namespace weft
