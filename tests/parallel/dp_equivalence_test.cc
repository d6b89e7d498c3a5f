// Data parallelism (alone and with tensor or pipeline parallelism) against the serial model:
// replicas each take 1/dp of every global batch and average their gradients; 10 AdamW steps of a
// tiny GPT give the serial losses within 1e-5 relative. mpirun -n 2: dp=2; -n 4: dp=4,
// tp=2 x dp=2, pp=2 x dp=2.
#include <gtest/gtest.h>

#include <vector>

#include "support/mpi_test.h"
#include "support/tiny_gpt.h"
#include "weft/core/rng.h"
#include "weft/parallel/groups.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/runtime/train_step.h"
#include "weft/schedule/schedule.h"

namespace weft {
namespace {

model::GptConfig tiny() { return test::tiny_gpt(4, 32); }

constexpr int kB = 2, kT = 8, kSteps = 10, kM = 4;  // kM microbatches per replica

std::vector<int32_t> global_batch(int step, int n) {
  std::vector<int32_t> t(n);
  const uint64_t key = stream_key(21, "dp_equivalence.tokens");
  for (int i = 0; i < n; ++i) {
    t[i] = static_cast<int32_t>(uniform_at(key, uint64_t(step) * n + i) * 61) % 61;
  }
  return t;
}

void expect_data_parallel_equals_serial(int tp, int pp, int dp) {
  comm::Communicator& world = test::test_world();
  if (world.size() != tp * pp * dp) return;
  const int block = kB * kT, per_replica = kM * block, n = dp * per_replica;
  // The serial run: all kM*dp microbatches of each global batch.
  model::Gpt serial(tiny(), kB, kT);
  serial.init(4);
  optim::AdamW opt(serial.param_layout().buffer, serial.param_layout().weight_decay_flags());
  std::vector<float> expected;
  for (int s = 0; s < kSteps; ++s) {
    const auto t = global_batch(s, n + 1);
    expected.push_back(
        runtime::train_step(serial, opt, t.data(), t.data() + 1, kB, kT, kM * dp, 1e-3f, 1.0).loss);
  }
  const parallel::Topology topo({.tp = tp, .pp = pp, .dp = dp});
  parallel::ProcessGroups groups = parallel::make_groups(world, topo);
  const parallel::Coord me = topo.coord(world.rank());
  const schedule::Schedule s = schedule::add_optimizer_step(schedule::add_communication(
      schedule::make_schedule(schedule::Kind::OneFOneB, {.pp = pp, .vp = 1, .microbatches = kM})
          .value_or_throw("")));
  runtime::PipelineOptions o;
  o.B = kB;
  o.T = kT;
  o.tp = {groups.tp.get(), false};
  o.pp = groups.pp.get();
  o.dp = groups.dp.get();
  o.pp_rank = me.pp;
  o.groups = {groups.model.get(), groups.embedding.get()};
  runtime::PipelineRunner runner(tiny(), s, o);
  runner.init(4);
  for (int step = 0; step < kSteps; ++step) {
    const auto t = global_batch(step, n + 1);
    const int32_t* mine = t.data() + me.dp * per_replica;  // this replica's kM microbatches
    const float loss = runner.step(mine, mine + 1, 1e-3f, 1.0).loss;
    EXPECT_NEAR(loss, expected[step], 1e-5 * expected[step])
        << "tp=" << tp << " pp=" << pp << " dp=" << dp << " step " << step;
  }
}

TEST(DataParallel, TrainsLikeTheSerialModel) {
  expect_data_parallel_equals_serial(1, 1, 2);
  expect_data_parallel_equals_serial(1, 1, 4);
  expect_data_parallel_equals_serial(2, 1, 2);
  expect_data_parallel_equals_serial(1, 2, 2);
}

}  // namespace
}  // namespace weft
