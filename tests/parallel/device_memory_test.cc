// The one memory model (model/memory.h) is what the device engine allocates (issue #19): for each
// layout, every rank (a thread of this process, support/thread_communicator.h) builds a
// runtime::PipelineRunner on the host-bf16 backend (kernels/backend.h, which counts its blocks as
// the CUDA arena does) and the backend's allocated_bytes() must equal, to the byte,
//   - device_bytes, which sizes the CUDA arena and is the trainer's reported prediction;
//   - the planner's weft_rank_memory for the same configuration in bf16-mixed (planner::
//     peak_memory's per-rank figure), so what `weft plan` says fits is what is allocated.
// after a step (from ZeRO 2 on the first step fills the unit pool the prediction counts; before
// that nothing is allocated by a step). Layouts: tp 1/2 (with and without sequence
// parallelism), pp 1/2 (1f1b, gpipe, interleaved vp=2, zb-h1), dp 2 with ZeRO 0-3, tp2 x pp2,
// pp2 x dp2 and tp2 x dp2 with ZeRO, recomputation none, selective and full, 1 to 8 microbatches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "support/thread_ranks.h"
#include "support/tiny_gpt.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/kernels.h"
#include "weft/layout/rank.h"
#include "weft/parallel/groups.h"
#include "weft/planner/memory_model.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/schedule/schedule.h"

namespace weft {
namespace {

constexpr int kB = 2, kT = 32;

model::GptConfig small_gpt() { return test::small_gpt_hs64(4, kT); }

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  schedule::Kind kind = schedule::Kind::OneFOneB;
  int vp = 1;
  int microbatches = 1;  // per replica
  model::Recompute recompute = model::Recompute::None;
  bool sp = false;     // sequence parallelism (tp > 1)
  int zero = 0;        // ZeRO stage over dp
  bool llama = false;  // test::small_llama_hs64 instead of GPT-2's small model
  int world() const { return tp * pp * dp; }
  std::string str() const {
    return "tp=" + std::to_string(tp) + (sp ? " sp" : "") + " pp=" + std::to_string(pp) +
           " dp=" + std::to_string(dp) + (zero > 0 ? " zero=" + std::to_string(zero) : "") +
           " vp=" + std::to_string(vp) + " " + std::string(schedule::kind_name(kind)) +
           " m=" + std::to_string(microbatches) +
           " recompute=" + std::string(model::recompute_name(recompute)) + (llama ? " llama" : "");
  }
  model::GptConfig model() const { return llama ? test::small_llama_hs64(4, kT) : small_gpt(); }
};

// What one rank allocated and what it was told beforehand.
struct RankMemory {
  int pp_rank = 0;
  int64_t allocated = 0, after_step = 0, trainer = 0, planner = 0;
};

RankMemory run_rank(const Layout& l, comm::Communicator& world) {
  const parallel::Topology topo({.tp = l.tp, .pp = l.pp, .dp = l.dp});
  parallel::ProcessGroups groups = parallel::make_groups(world, topo);
  const parallel::Coord me = topo.coord(world.rank());
  const model::RankShape shape{.B = kB,
                               .T = kT,
                               .recompute = l.recompute,
                               .pp_rank = me.pp,
                               .tp = {l.tp, l.sp},
                               .zero = {l.zero, l.dp}};

  RankMemory r;
  r.pp_rank = me.pp;
  const model::GptConfig cfg = l.model();
  const schedule::Schedule program =
      runtime::runner_schedule(cfg, l.kind, l.pp, l.vp, l.microbatches).value();
  r.trainer = runtime::device_bytes(cfg, program, shape).total();
  planner::Job job;
  job.model = cfg;
  job.seq_len = kT;
  job.global_batch = kB * l.microbatches * l.dp;
  job.world = l.world();
  job.precision = planner::Precision::BF16Mixed;
  const layout::Layout c{.tp = l.tp,
                         .pp = l.pp,
                         .dp = l.dp,
                         .vp = l.vp,
                         .micro_batch = kB,
                         .schedule = l.kind,
                         .recompute = l.recompute,
                         .sequence_parallel = l.sp,
                         .zero = l.zero};
  r.planner = planner::weft_rank_memory(job, c, me.pp).total();

  const auto backend = kernels::make_host_backend(Precision::BF16Mixed);
  // The host backend: the host groups are the data groups.
  runtime::PipelineRunner t(
      cfg, program,
      runtime::pipeline_options(groups, shape, {}, backend.get(),
                                [](comm::Communicator& host) { return &host; }));
  r.allocated = backend->allocated_bytes();
  t.init(3);
  const int per_replica = l.microbatches * kB * kT;
  std::vector<int32_t> tokens(per_replica + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 3) % 101);
  t.step(tokens.data(), tokens.data() + 1, 1e-3f, 1.0);
  r.after_step = backend->allocated_bytes();
  return r;
}

void expect_prediction_is_allocation(const Layout& l) {
  const std::vector<RankMemory> ranks = test::run_thread_ranks<RankMemory>(
      l.world(), l.str(), [&](comm::Communicator& world) { return run_rank(l, world); });
  for (int r = 0; r < l.world(); ++r) {
    const RankMemory& m = ranks[r];
    // From ZeRO 2 on the first step fills the unit pool (optim/unit_pool.h), which the prediction
    // counts; after that, and before it for ZeRO 0/1, a step allocates nothing.
    EXPECT_EQ(m.trainer, m.after_step) << l.str() << " rank " << r << ": device_bytes";
    EXPECT_EQ(m.planner, m.after_step) << l.str() << " rank " << r << ": the planner's bf16";
    if (l.zero < 2) {
      EXPECT_EQ(m.after_step, m.allocated) << l.str() << " rank " << r << ": a step allocated";
    } else {
      EXPECT_LT(m.allocated, m.after_step) << l.str() << " rank " << r << ": no unit pool";
    }
    std::printf(
        "%-46s rank %d (pp %d): predicted %10lld B, allocated %10lld B, after a step %lld\n",
        l.str().c_str(), r, m.pp_rank, static_cast<long long>(m.trainer),
        static_cast<long long>(m.allocated), static_cast<long long>(m.after_step));
  }
}

class DeviceMemory : public ::testing::Test {
 protected:
  // The ranks share the cores: one kernel thread each.
  void SetUp() override { kernels::set_num_threads(1); }
};

TEST_F(DeviceMemory, OneRankAllocatesWhatTheModelPredicts) {
  using model::Recompute;
  for (const Layout& l : {Layout{}, Layout{.microbatches = 4},
                          Layout{.microbatches = 4, .recompute = Recompute::Full},
                          Layout{.microbatches = 2, .recompute = Recompute::Selective}}) {
    expect_prediction_is_allocation(l);
  }
}

TEST_F(DeviceMemory, EveryRankOfTwoAllocatesWhatTheModelPredicts) {
  using model::Recompute;
  using schedule::Kind;
  for (const Layout& l : {
           Layout{.tp = 2, .microbatches = 2},
           Layout{.tp = 2, .microbatches = 2, .recompute = Recompute::Full},
           Layout{.tp = 2, .microbatches = 2, .sp = true},
           Layout{.tp = 2, .microbatches = 2, .recompute = Recompute::Full, .sp = true},
           Layout{.pp = 2, .kind = Kind::ZeroBubbleH1, .microbatches = 4},
           Layout{.pp = 2, .kind = Kind::OneFOneB, .microbatches = 2},
           Layout{.pp = 2, .kind = Kind::OneFOneB, .microbatches = 8},
           Layout{.pp = 2, .kind = Kind::OneFOneB, .microbatches = 4, .recompute = Recompute::Full},
           Layout{.pp = 2, .kind = Kind::GPipe, .microbatches = 4},
           Layout{.pp = 2, .kind = Kind::Interleaved, .vp = 2, .microbatches = 2},
           Layout{.pp = 2, .kind = Kind::Interleaved, .vp = 2, .microbatches = 6},
           Layout{.pp = 2,
           .kind = Kind::Interleaved,
           .vp = 2,
           .microbatches = 4,
           .recompute = Recompute::Full},
           Layout{.dp = 2, .microbatches = 2},
           Layout{.dp = 2, .microbatches = 2, .zero = 1},
           Layout{.dp = 2, .microbatches = 2, .zero = 2},
           Layout{.dp = 2, .microbatches = 2, .zero = 3},
           Layout{.dp = 2, .microbatches = 4, .recompute = Recompute::Full, .zero = 3},
       }) {
    expect_prediction_is_allocation(l);
  }
}

// The model with every modern choice: no position table, RMSNorm without means, SwiGLU's 2F-wide
// fc and its d.fc_act, grouped-query qkv, an untied lm_head unit.
TEST_F(DeviceMemory, LlamaVariantAllocatesWhatTheModelPredicts) {
  using model::Recompute;
  using schedule::Kind;
  for (const Layout& l : {
           Layout{.microbatches = 4, .llama = true},
           Layout{.microbatches = 2, .recompute = Recompute::Full, .llama = true},
           Layout{.tp = 2,
           .microbatches = 2,
           .recompute = Recompute::Selective,
           .sp = true,
           .llama = true},
           Layout{.pp = 2, .kind = Kind::Interleaved, .vp = 2, .microbatches = 4, .llama = true},
           Layout{.pp = 2, .kind = Kind::ZeroBubbleH1, .microbatches = 4, .llama = true},
           Layout{.dp = 2, .microbatches = 2, .zero = 3, .llama = true},
       }) {
    expect_prediction_is_allocation(l);
  }
}

TEST_F(DeviceMemory, EveryRankOfFourAllocatesWhatTheModelPredicts) {
  using schedule::Kind;
  for (const Layout& l :
       {Layout{.tp = 2, .pp = 2, .kind = Kind::OneFOneB, .microbatches = 4},
        Layout{.tp = 2, .pp = 2, .kind = Kind::Interleaved, .vp = 2, .microbatches = 4},
        Layout{.tp = 2, .pp = 2, .kind = Kind::ZeroBubbleH1, .microbatches = 4, .sp = true},
        Layout{.pp = 2, .dp = 2, .kind = Kind::OneFOneB, .microbatches = 2},
        Layout{.pp = 2, .dp = 2, .kind = Kind::Interleaved, .vp = 2, .microbatches = 4, .zero = 2},
        Layout{.tp = 2, .dp = 2, .microbatches = 2, .sp = true, .zero = 3},
        Layout{.pp = 2, .dp = 2, .kind = Kind::ZeroBubbleH1, .microbatches = 4, .zero = 3}}) {
    expect_prediction_is_allocation(l);
  }
}

// The host fp32 engine's unit pool (ZeRO 2/3) against model::zero_pool_bytes, to the byte. Its
// blocks are whole huge pages from 2 MiB on: on this GPT a layer's 3.0 MiB and the wte's 4.0 MiB
// take 4 MiB each, and the model counted them as one size, one buffer short of what the pool holds
// (ZeRO-3 measured 6% above its prediction on tune-4l at dp=2).
TEST(HostUnitPool, HoldsWhatTheModelCounts) {
  kernels::set_num_threads(1);
  model::GptConfig cfg = test::small_gpt_hs64(2, kT);
  cfg.n_embd = 256;
  cfg.n_head = 4;
  cfg.vocab_size = 4096;
  cfg.pad_vocab_to = 128;
  using schedule::Kind;
  for (const Layout& l :
       {Layout{.dp = 2, .microbatches = 2, .zero = 2},
        Layout{.dp = 2, .microbatches = 2, .zero = 3},
        Layout{.pp = 2, .dp = 2, .kind = Kind::ZeroBubbleH1, .microbatches = 4, .zero = 3}}) {
    struct Held {
      int64_t pool = 0, model = 0;
    };
    const std::vector<Held> ranks =
        test::run_thread_ranks<Held>(l.world(), l.str(), [&](comm::Communicator& world) {
          const parallel::Topology topo({.tp = l.tp, .pp = l.pp, .dp = l.dp});
          parallel::ProcessGroups groups = parallel::make_groups(world, topo);
          const int pp_rank = topo.coord(world.rank()).pp;
          const schedule::Schedule program =
              runtime::runner_schedule(cfg, l.kind, l.pp, l.vp, l.microbatches).value();
          runtime::PipelineRunner runner(cfg, program,
                                         runtime::pipeline_options(groups,
                                                                   {.B = kB,
                                                                    .T = kT,
                                                                    .recompute = l.recompute,
                                                                    .pp_rank = pp_rank,
                                                                    .tp = {l.tp, l.sp},
                                                                    .zero = {l.zero, l.dp}},
                                                                   {}));
          runner.init(3);
          std::vector<int32_t> tokens(l.microbatches * kB * kT + 1);
          for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 4001);
          runner.step(tokens.data(), tokens.data() + 1, 1e-3f, 1.0);
          Held h;
          for (int64_t bytes : runner.unit_pool().sizes())
            h.pool += kernels::host_resident_bytes(bytes);
          h.model =
              model::zero_pool_bytes(cfg, {.zero = {l.zero, l.dp}},
                                     layout::rank_program(cfg, program, pp_rank), Precision::FP32);
          return h;
        });
    for (int r = 0; r < l.world(); ++r) {
      EXPECT_EQ(ranks[r].model, ranks[r].pool) << l.str() << " rank " << r;
      EXPECT_GT(ranks[r].pool, 0) << l.str() << " rank " << r;
    }
  }
}

// What a rank holds is bounded by what its schedule keeps in flight, never by the number of
// microbatches (DESIGN.md §1.8, issue #37), on both host engines and every schedule: at pp=2 each
// layout runs steps of m and of 8m microbatches, and on every rank the backend's allocated bytes
// after a step equal the memory model's (host-bf16: device_bytes; host fp32: the buffers
// as the backend counts them, model::Counted::Backend) and do not change with m, except GPipe's,
// which keeps every microbatch in flight: there they grow by exactly the added activation slots
// (whose count the schedule gives), nothing else.
struct Held {
  int pp_rank = 0;
  int64_t after_step = 0, predicted = 0;
  std::vector<int> slots;           // per slot pool
  std::vector<int64_t> slot_bytes;  // per slot pool: one slot
};

Held run_many(const Layout& l, Precision precision, comm::Communicator& world) {
  const parallel::Topology topo({.tp = l.tp, .pp = l.pp, .dp = l.dp});
  parallel::ProcessGroups groups = parallel::make_groups(world, topo);
  const int pp_rank = topo.coord(world.rank()).pp;
  const model::RankShape shape{.B = kB,
                               .T = kT,
                               .recompute = l.recompute,
                               .pp_rank = pp_rank,
                               .tp = {l.tp, l.sp},
                               .zero = {l.zero, l.dp}};
  const model::GptConfig cfg = small_gpt();
  const schedule::Schedule program =
      runtime::runner_schedule(cfg, l.kind, l.pp, l.vp, l.microbatches).value();
  const model::RankProgram rank = layout::rank_program(cfg, program, pp_rank);
  Held h;
  h.pp_rank = pp_rank;
  h.slots = rank.slots;
  h.predicted =
      model::estimate_rank_memory(
          cfg, shape, rank,
          {.precision = precision, .runtime_bytes = 0, .counted = model::Counted::Backend})
          .total();
  for (size_t p = 0; p < rank.slots.size(); ++p) {
    const auto c = std::find_if(rank.chunks.begin(), rank.chunks.end(),
                                [&](const model::ChunkMemory& c) { return c.pool == int(p); });
    h.slot_bytes.push_back(
        model::gpt_activation_layout(cfg, kB, kT, l.recompute, shape.tp, c->stage, precision)
            .bytes(precision));
  }
  const auto backend = kernels::make_host_backend(precision);
  runtime::PipelineRunner t(
      cfg, program,
      runtime::pipeline_options(groups, shape, {}, backend.get(),
                                [](comm::Communicator& host) { return &host; }));
  t.init(3);
  std::vector<int32_t> tokens(l.microbatches * kB * kT + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 3) % 101);
  t.step(tokens.data(), tokens.data() + 1, 1e-3f, 1.0);
  h.after_step = backend->allocated_bytes();
  return h;
}

TEST_F(DeviceMemory, ARanksMemoryDoesNotGrowWithItsMicrobatches) {
  using schedule::Kind;
  for (const Precision precision : {Precision::BF16Mixed, Precision::FP32}) {
    for (const Layout& base :
         {Layout{.pp = 2, .kind = Kind::OneFOneB, .microbatches = 4},
          Layout{.pp = 2, .kind = Kind::Interleaved, .vp = 2, .microbatches = 4},
          Layout{.pp = 2, .kind = Kind::ZeroBubbleH1, .microbatches = 4},
          Layout{.pp = 2,
          .kind = Kind::OneFOneB,
          .microbatches = 4,
          .recompute = model::Recompute::Full},
          Layout{.pp = 2, .kind = Kind::GPipe, .microbatches = 4}}) {
      std::vector<std::vector<Held>> runs;
      for (const int m : {base.microbatches, 8 * base.microbatches}) {
        Layout l = base;
        l.microbatches = m;
        runs.push_back(test::run_thread_ranks<Held>(
            l.world(), l.str(), [&](comm::Communicator& w) { return run_many(l, precision, w); }));
      }
      for (int r = 0; r < base.world(); ++r) {
        const Held &few = runs[0][r], &many = runs[1][r];
        const char* name = precision == Precision::FP32 ? "fp32" : "bf16-mixed";
        const std::string what = base.str() + " " + name + " rank " + std::to_string(r);
        EXPECT_EQ(few.after_step, few.predicted) << what << " m=" << base.microbatches;
        EXPECT_EQ(many.after_step, many.predicted) << what << " m=" << 8 * base.microbatches;
        ASSERT_EQ(few.slots.size(), many.slots.size()) << what;
        int64_t grown = 0;  // the activation slots the larger step keeps in flight on top
        for (size_t p = 0; p < few.slots.size(); ++p) {
          grown += int64_t{many.slots[p] - few.slots[p]} * few.slot_bytes[p];
        }
        if (base.kind != Kind::GPipe) {
          EXPECT_EQ(grown, 0) << what;
        }
        EXPECT_EQ(many.after_step - few.after_step, grown) << what;
        std::printf("%-44s %-10s rank %d: %lld B at m=%d, %lld B at m=%d (slots %d -> %d)\n",
                    base.str().c_str(), name, r, static_cast<long long>(few.after_step),
                    base.microbatches, static_cast<long long>(many.after_step),
                    8 * base.microbatches, few.slots[0], many.slots[0]);
      }
    }
  }
}

}  // namespace
}  // namespace weft
