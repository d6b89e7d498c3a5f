// Data parallelism with ZeRO stages 0-3, alone and composed with tensor and pipeline parallelism,
// against the serial model: replicas each take 1/dp of every global batch (kM microbatches each:
// gradient accumulation), 10 AdamW steps of a tiny GPT give the serial losses within 1e-5
// relative, and the final parameters, gathered into the serial layout, are within 1e-5 (relative
// L2; each tensor within 1e-4). Every layout of tp, pp, dp in {1, 2} and dp=4, tp=2 x dp=4,
// pp=2 x dp=4, each with zero 0, 1, 2, 3 (tp=2 with sequence parallelism for zero 1 and 3);
// pipelines also with the interleaved and ZB-H1 schedules.
// mpirun -n 1, 2, 4 and 8 run the layouts of that world size.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "support/mpi_test.h"
#include "support/param_compare.h"
#include "support/shards.h"
#include "support/tiny_gpt.h"
#include "weft/core/rng.h"
#include "weft/model/zero_parts.h"
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

struct Run {
  std::vector<float> losses, params;  // params in the serial layout
};

// The serial run over all kM * dp microbatches of each global batch (cached per dp).
const Run& serial_run(int dp) {
  static std::map<int, Run> cache;
  auto it = cache.find(dp);
  if (it != cache.end()) return it->second;
  const int n = dp * kM * kB * kT;
  model::Gpt serial(tiny(), kB, kT);
  serial.init(4);
  runtime::DistributedOptimizer opt(serial, nullptr, 0);
  Run r;
  for (int s = 0; s < kSteps; ++s) {
    const auto t = global_batch(s, n + 1);
    r.losses.push_back(
        runtime::train_step(serial, opt, t.data(), t.data() + 1, kB, kT, kM * dp, 1e-3f, 1.0).loss);
  }
  r.params.assign(serial.params().data(), serial.params().data() + serial.params().size());
  return cache.emplace(dp, std::move(r)).first->second;
}

struct Layout {
  int tp = 1, pp = 1, dp = 1, zero = 0, vp = 1;
  schedule::Kind kind = schedule::Kind::OneFOneB;
  // With tp = 2, odd ZeRO stages also split the sequence: the LayerNorm gradients are then summed
  // over tp on the dp shards.
  bool sequence_parallel() const { return tp > 1 && zero % 2 == 1; }
  std::string str() const {
    return "tp=" + std::to_string(tp) + (sequence_parallel() ? "+sp" : "") +
           " pp=" + std::to_string(pp) + " dp=" + std::to_string(dp) +
           " zero=" + std::to_string(zero) + " vp=" + std::to_string(vp) + " " +
           std::string(schedule::kind_name(kind));
  }
};

void expect_equals_serial(const Layout& l) {
  comm::Communicator& world = test::test_world();
  const int per_replica = kM * kB * kT, n = l.dp * per_replica;
  const Run& expected = serial_run(l.dp);
  const parallel::Topology topo({.tp = l.tp, .pp = l.pp, .dp = l.dp});
  parallel::ProcessGroups groups = parallel::make_groups(world, topo);
  const parallel::Coord me = topo.coord(world.rank());
  const schedule::Schedule s = schedule::add_optimizer_step(schedule::add_communication(
      schedule::make_schedule(l.kind, {.pp = l.pp, .vp = l.vp, .microbatches = kM})
          .value_or_throw("")));
  runtime::PipelineOptions o;
  o.B = kB;
  o.T = kT;
  o.tp = {groups.tp.get(), l.sequence_parallel()};
  o.pp = groups.pp.get();
  o.dp = groups.dp.get();
  o.pp_rank = me.pp;
  o.zero = l.zero;
  o.groups = {groups.model.get(), groups.embedding.get()};
  runtime::PipelineRunner runner(tiny(), s, o);
  runner.init(4);
  for (int step = 0; step < kSteps; ++step) {
    const auto t = global_batch(step, n + 1);
    const int32_t* mine = t.data() + me.dp * per_replica;  // this replica's kM microbatches
    const float loss = runner.step(mine, mine + 1, 1e-3f, 1.0).loss;
    EXPECT_NEAR(loss, expected.losses[step], 1e-5 * expected.losses[step])
        << l.str() << " step " << step;
  }
  // The final parameters: each chunk's (ZeRO: this rank's parts of the master copy, summed over
  // dp), placed in the serial layout and summed over the replica's ranks.
  const model::ParamLayout global = model::gpt_param_layout(tiny());
  FlatBuffer all(global.buffer);
  const int dp_rank = groups.dp ? groups.dp->rank() : 0;
  for (size_t j = 0; j < runner.chunks().size(); ++j) {
    const model::Gpt& c = *runner.chunks()[j];
    const model::ParamLayout& layout = c.param_layout();
    runtime::DistributedOptimizer& opt = *runner.optimizers()[j];
    FlatBuffer p(layout.buffer);
    p.zero();
    for (const auto& part : model::zero_owned_parts(layout, opt.zero(), l.dp, dp_rank)) {
      std::copy_n(opt.state().params + part.at, part.n,
                  p.data() + layout.buffer.slices()[part.slice].offset + part.begin);
    }
    if (opt.zero() > 0 && groups.dp) groups.dp->all_reduce(p.data(), p.size());
    test::place_shards(layout, c.stage(), p.data(), global, all.data());
  }
  if (groups.model != nullptr) groups.model->all_reduce(all.data(), all.size());
  test::expect_params_close(global, all.data(), expected.params.data(), tiny().n_embd, {1e-5, 1e-4},
                            l.str());
}

TEST(DataParallel, EveryLayoutAndZeroStageTrainsLikeTheSerialModel) {
  using schedule::Kind;
  const int world = test::test_world().size();
  std::vector<Layout> layouts;
  for (int tp : {1, 2}) {
    for (int pp : {1, 2}) {
      for (int dp : {1, 2, 4}) {
        if (tp * pp * dp != world || (dp == 4 && tp * pp > 2)) continue;
        for (int zero = 0; zero <= 3; ++zero) layouts.push_back({tp, pp, dp, zero});
      }
    }
  }
  if (world == 4) {  // the other schedules over sharded replicas
    for (int zero : {1, 2, 3}) {
      layouts.push_back({1, 2, 2, zero, 2, Kind::Interleaved});
      layouts.push_back({1, 2, 2, zero, 1, Kind::ZeroBubbleH1});
    }
  }
  ASSERT_FALSE(layouts.empty()) << "no layout for " << world << " ranks";
  for (const Layout& l : layouts) expect_equals_serial(l);
}

}  // namespace
}  // namespace weft
