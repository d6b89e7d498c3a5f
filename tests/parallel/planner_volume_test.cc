// The planner's communication volume (planner/comm_volume.h) against the Recording communicator
// around one real training step of the pipeline runner: per group (tp, pp, embedding) and per
// op, the same number of calls and elements. mpirun -n 2: tp=2, pp=2; -n 4: tp=2 x pp=2.
// The same on the host-bf16 backend (bf16 elements and bytes), ZeRO 0-3 included, and the device
// trainer's wiring of the runner (runtime/pipeline_runner.h) for its tp group: tp=2 (-n 2), tp=4
// and tp=2 x dp=2 (-n 4). And the model variants (Llama's choices with grouped-query attention;
// multi-query, tied, with biases): their units, norms and untied head in every group.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "support/mpi_test.h"
#include "support/tiny_gpt.h"
#include "weft/comm/recording_communicator.h"
#include "weft/core/rng.h"
#include "weft/kernels/backend.h"
#include "weft/parallel/groups.h"
#include "weft/planner/comm_volume.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/schedule/schedule.h"

namespace weft {
namespace {

model::GptConfig tiny() { return test::tiny_gpt(4, 32); }

// Llama's choices on the tiny model: rope, RMSNorm, SwiGLU of F = 48, 2 key/value heads for 4
// query heads (split by tp = 2), untied, no biases.
model::GptConfig tiny_llama() {
  model::GptConfig c = tiny();
  c.position = model::Position::Rope;
  c.norm = model::NormKind::RMSNorm;
  c.mlp = model::MlpKind::SwiGLU;
  c.ffn_hidden_size = 48;
  c.n_kv_head = 2;
  c.tie_embeddings = false;
  c.bias = false;
  return c;
}

// Multi-query attention (one key/value head: no tp), tied, with biases and LayerNorm.
model::GptConfig tiny_mqa() {
  model::GptConfig c = tiny();
  c.position = model::Position::Rope;
  c.mlp = model::MlpKind::SwiGLU;
  c.n_kv_head = 1;
  return c;
}

struct Volume {
  int64_t calls = 0, elements = 0, bytes = 0;
};
using Ops = std::map<comm::CommOp, Volume>;

Ops recorded(const comm::CommRecorder& rec, const std::string& group) {
  Ops out;
  for (const comm::CommRecord& r : rec.records()) {
    if (r.group != group) continue;
    out[r.op].calls += 1;
    out[r.op].elements += r.elements;
    out[r.op].bytes += r.bytes;
  }
  return out;
}

Ops predicted(const planner::GroupVolume& g) {
  Ops out;
  auto put = [&](comm::CommOp op, const planner::OpVolume& v) {
    if (v.ops > 0) out[op] = {v.ops, v.elements, v.bytes};
  };
  put(comm::CommOp::AllReduce, g.all_reduce);
  put(comm::CommOp::ReduceScatter, g.reduce_scatter);
  put(comm::CommOp::AllGather, g.all_gather);
  put(comm::CommOp::Send, g.send);
  put(comm::CommOp::Recv, g.recv);
  return out;
}

std::string show(const Ops& ops) {
  std::string s;
  for (const auto& [op, v] : ops) {
    s += std::string(comm::comm_op_name(op)) + " " + std::to_string(v.calls) + " calls, " +
         std::to_string(v.elements) + " elements, " + std::to_string(v.bytes) + " bytes; ";
  }
  return s;
}

void expect_planner_volume(int tp, int pp, bool sp, model::Recompute recompute, schedule::Kind kind,
                           int vp, int dp = 1, int zero = 0, Precision precision = Precision::FP32,
                           const model::GptConfig& model = tiny()) {
  comm::Communicator& world = test::test_world();
  if (world.size() != tp * pp * dp) return;
  const parallel::Topology topo({.tp = tp, .pp = pp, .dp = dp});
  parallel::ProcessGroups groups = parallel::make_groups(world, topo);
  auto rec = std::make_shared<comm::CommRecorder>();
  auto wrap = [&](std::unique_ptr<comm::Communicator>& c) -> std::unique_ptr<comm::Communicator> {
    if (!c) return nullptr;
    return std::make_unique<comm::RecordingCommunicator>(std::move(c), rec);
  };
  auto tp_comm = wrap(groups.tp), pp_comm = wrap(groups.pp), emb = wrap(groups.embedding);
  auto dp_comm = wrap(groups.dp);
  const int B = 2, T = 8, m = 4;
  const schedule::Schedule s = schedule::add_optimizer_step(schedule::add_communication(
      schedule::make_schedule(kind, {.pp = pp, .vp = vp, .microbatches = m}).value_or_throw("")));
  const auto backend = kernels::make_host_backend(precision);
  runtime::PipelineOptions o;
  o.backend = backend.get();
  o.shape = {.B = B,
             .T = T,
             .recompute = recompute,
             .pp_rank = topo.coord(world.rank()).pp,
             .tp = {tp, sp},
             .zero = {zero, dp}};
  o.tp = tp_comm.get();
  o.pp = pp_comm.get();
  o.dp = dp_comm.get();
  o.groups = {groups.model.get(), emb.get()};
  runtime::PipelineRunner runner(model, s, o);
  runner.init(3);
  std::vector<int32_t> tokens(m * B * T + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 1) % 61);
  rec->clear();
  runner.step(tokens.data(), tokens.data() + 1, 1e-3f, 1.0);

  planner::Job job;
  job.model = model;
  job.seq_len = T;
  job.global_batch = m * B * dp;
  job.world = tp * pp * dp;
  job.precision = precision;
  layout::Layout c;
  c.tp = tp;
  c.pp = pp;
  c.dp = dp;
  c.zero = zero;
  c.vp = vp;
  c.micro_batch = B;
  c.schedule = kind;
  c.recompute = recompute;
  c.sequence_parallel = sp;
  const planner::StepVolume v =
      planner::step_volume(job, c, o.shape.pp_rank, topo.coord(world.rank()).dp);
  const std::string what =
      "tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) + " sp=" + std::to_string(sp) +
      " recompute=" + std::string(model::recompute_name(recompute)) + " vp=" + std::to_string(vp) +
      " dp=" + std::to_string(dp) + " zero=" + std::to_string(zero) + " " +
      std::string(planner::precision_name(precision)) + " " + model.name + " pp rank " +
      std::to_string(o.shape.pp_rank);
  EXPECT_EQ(show(recorded(*rec, "tp")), show(predicted(v.tp))) << what << " (tp)";
  EXPECT_EQ(show(recorded(*rec, "pp")), show(predicted(v.pp))) << what << " (pp)";
  EXPECT_EQ(show(recorded(*rec, "embedding")), show(predicted(v.embedding)))
      << what << " (embedding)";
  EXPECT_EQ(show(recorded(*rec, "dp")), show(predicted(v.dp))) << what << " (dp)";
}

// The device trainer's wiring (runtime::pipeline_options with a backend, as `weft train --device`
// builds it) of the same runner: its tp group over one step, against the planner's.
void expect_device_tp_volume(int tp, int dp) {
  comm::Communicator& world = test::test_world();
  if (world.size() != tp * dp) return;
  const parallel::Topology topo({.tp = tp, .pp = 1, .dp = dp});
  parallel::ProcessGroups groups = parallel::make_groups(world, topo);
  const int B = 2, T = 8, m = 4;
  const auto backend = kernels::make_host_backend(Precision::BF16Mixed);
  runtime::PipelineOptions o =
      runtime::pipeline_options(groups, {.B = B, .T = T, .tp = {tp, false}, .zero = {0, dp}}, {},
                                backend.get(), [](comm::Communicator& host) { return &host; });
  auto rec = std::make_shared<comm::CommRecorder>();
  comm::RecordingCommunicator tp_comm(std::move(groups.tp), rec);
  o.tp = &tp_comm;
  runtime::PipelineRunner trainer(
      tiny(), runtime::runner_schedule(tiny(), schedule::Kind::OneFOneB, 1, 1, m).value(), o);
  trainer.init(3);
  std::vector<int32_t> tokens(m * B * T + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 1) % 61);
  rec->clear();
  trainer.step(tokens.data(), tokens.data() + 1, 1e-3f, 1.0);

  planner::Job job;
  job.model = tiny();
  job.seq_len = T;
  job.global_batch = m * B * dp;
  job.world = tp * dp;
  job.precision = planner::Precision::BF16Mixed;
  layout::Layout c;
  c.tp = tp;
  c.dp = dp;
  c.micro_batch = B;
  const planner::StepVolume v = planner::step_volume(job, c, 0, topo.coord(world.rank()).dp);
  EXPECT_EQ(show(recorded(*rec, "tp")), show(predicted(v.tp)))
      << "device tp=" << tp << " dp=" << dp << " (tp)";
}

TEST(PlannerVolume, EqualsTheRecordedDeviceStep) {
  expect_device_tp_volume(2, 1);
  expect_device_tp_volume(4, 1);
  expect_device_tp_volume(2, 2);
}

TEST(PlannerVolume, EqualsTheRecordedStep) {
  using schedule::Kind;
  for (bool sp : {false, true}) {
    for (auto r : {model::Recompute::None, model::Recompute::Full}) {
      expect_planner_volume(2, 1, sp, r, Kind::OneFOneB, 1);
      expect_planner_volume(1, 2, sp, r, Kind::OneFOneB, 1);
      expect_planner_volume(2, 2, sp, r, Kind::OneFOneB, 1);
      expect_planner_volume(2, 2, sp, r, Kind::Interleaved, 2);
    }
  }
  // Data parallelism, every ZeRO stage, with tp or a pipeline.
  for (int zero = 0; zero <= 3; ++zero) {
    expect_planner_volume(1, 1, false, model::Recompute::None, Kind::OneFOneB, 1, 2, zero);
    expect_planner_volume(2, 1, true, model::Recompute::Full, Kind::OneFOneB, 1, 2, zero);
    expect_planner_volume(1, 2, false, model::Recompute::None, Kind::OneFOneB, 1, 2, zero);
    expect_planner_volume(1, 2, false, model::Recompute::Selective, Kind::ZeroBubbleH1, 1, 2, zero);
  }
  expect_planner_volume(1, 1, false, model::Recompute::None, Kind::OneFOneB, 1, 4, 3);
}

// The same runner on the host-bf16 backend (the device's emulation): bf16 boundaries, tp sums and
// ZeRO's weight gathers as bf16 elements, fp32 gradient reductions, priced by the planner's bf16.
TEST(PlannerVolume, EqualsTheRecordedBf16Step) {
  using schedule::Kind;
  const Precision bf16 = Precision::BF16Mixed;
  for (bool sp : {false, true}) {
    expect_planner_volume(2, 1, sp, model::Recompute::None, Kind::OneFOneB, 1, 1, 0, bf16);
    expect_planner_volume(2, 2, sp, model::Recompute::Full, Kind::Interleaved, 2, 1, 0, bf16);
  }
  expect_planner_volume(1, 2, false, model::Recompute::None, Kind::OneFOneB, 1, 1, 0, bf16);
  for (int zero = 0; zero <= 3; ++zero) {
    expect_planner_volume(1, 1, false, model::Recompute::None, Kind::OneFOneB, 1, 2, zero, bf16);
    expect_planner_volume(2, 1, true, model::Recompute::Full, Kind::OneFOneB, 1, 2, zero, bf16);
    expect_planner_volume(1, 2, false, model::Recompute::None, Kind::ZeroBubbleH1, 1, 2, zero,
                          bf16);
  }
  expect_planner_volume(1, 1, false, model::Recompute::None, Kind::OneFOneB, 1, 4, 3, bf16);
}

// The variants: the same volumes as their recorded steps, with an untied head (no embedding
// group; lm_head a ZeRO unit of its own), RMSNorm's weight-only sequence-parallel sums, grouped
// key/value heads split by tp, and no wpe unit; in fp32 and on the host-bf16 backend.
void expect_variants_volume(Precision p) {
  using schedule::Kind;
  const model::GptConfig llama = tiny_llama(), mqa = tiny_mqa();
  for (bool sp : {false, true}) {
    expect_planner_volume(2, 1, sp, model::Recompute::None, Kind::OneFOneB, 1, 1, 0, p, llama);
    expect_planner_volume(2, 2, sp, model::Recompute::Full, Kind::Interleaved, 2, 1, 0, p, llama);
  }
  expect_planner_volume(1, 2, false, model::Recompute::None, Kind::OneFOneB, 1, 1, 0, p, llama);
  expect_planner_volume(1, 2, false, model::Recompute::Selective, Kind::ZeroBubbleH1, 1, 1, 0, p,
                        mqa);
  for (int zero = 0; zero <= 3; ++zero) {
    expect_planner_volume(2, 1, true, model::Recompute::Full, Kind::OneFOneB, 1, 2, zero, p, llama);
    expect_planner_volume(1, 2, false, model::Recompute::None, Kind::OneFOneB, 1, 2, zero, p,
                          llama);
    expect_planner_volume(1, 2, false, model::Recompute::None, Kind::OneFOneB, 1, 2, zero, p, mqa);
  }
  expect_planner_volume(1, 1, false, model::Recompute::None, Kind::OneFOneB, 1, 4, 3, p, llama);
}

TEST(PlannerVolume, EqualsTheRecordedStepOfEveryVariant) {
  expect_variants_volume(Precision::FP32);
}

TEST(PlannerVolume, EqualsTheRecordedBf16StepOfEveryVariant) {
  expect_variants_volume(Precision::BF16Mixed);
}

}  // namespace
}  // namespace weft
