#include "weft/runtime/device_trainer.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <vector>

#include "weft/core/check.h"
#include "weft/model/gemm_shapes.h"
#include "weft/schedule/schedule.h"

namespace weft::runtime {
namespace {

// This rank's lowered program and its chunks: stages and activation slots.
struct Plan {
  schedule::Schedule schedule;
  std::vector<model::StageSpec> stages;  // chunk j: global stage pp_rank + j*pp
  std::vector<int> slots;
};

Plan plan(const model::GptConfig& cfg, int microbatches, const DeviceParallel& p) {
  Status s;
  if (p.pp < 1 || p.pp_rank < 0 || p.pp_rank >= p.pp) {
    s.add("pipeline rank " + std::to_string(p.pp_rank) + " of " + std::to_string(p.pp));
  }
  if (s.ok()) s.merge(model::validate_pipeline(cfg, p.pp, p.vp));
  s.throw_if_error("invalid device pipeline");
  Plan r;
  r.schedule = schedule::add_optimizer_step(schedule::add_communication(
      schedule::make_schedule(p.schedule, {.pp = p.pp, .vp = p.vp, .microbatches = microbatches})
          .value_or_throw("invalid device pipeline")));
  const std::vector<int> slots = schedule::peak_in_flight_per_chunk(r.schedule, p.pp_rank);
  for (int j = 0; j < p.vp; ++j) {
    const schedule::Shape& sh = r.schedule.shape;
    r.stages.push_back(model::pipeline_stage(cfg, sh.stage_of(p.pp_rank, j), sh.num_stages()));
    r.slots.push_back(std::max(1, slots[j]));
  }
  return r;
}

}  // namespace

model::MemoryEstimate DeviceTrainer::bytes(const model::GptConfig& cfg, int B, int T,
                                           int microbatches, const DeviceParallel& parallel,
                                           model::Recompute recompute) {
  // The one memory model (model/memory.h), told this rank's chunks as the constructor builds them:
  // the same stages and activation slots (plan()), and an input-gradient buffer per microbatch on
  // every stage but the first.
  const Plan p = plan(cfg, microbatches, parallel);
  std::vector<model::ChunkMemory> chunks;
  for (size_t j = 0; j < p.stages.size(); ++j) {
    chunks.push_back({p.stages[j], p.slots[j], !p.stages[j].embedding});
  }
  const int dp = parallel.dp_group != nullptr ? parallel.dp_group->size() : 1;
  return model::estimate_rank_memory(
      cfg, B, T, recompute, 1, {parallel.tp, parallel.sequence_parallel}, chunks, microbatches,
      parallel.pp > 1, parallel.schedule == schedule::Kind::ZeroBubbleH1, {parallel.zero, dp}, 0,
      model::Precision::BF16Mixed);
}

int64_t DeviceTrainer::arena_bytes(const model::GptConfig& cfg, int B, int T, int microbatches,
                                   const DeviceParallel& parallel, model::Recompute recompute) {
  int64_t gemm = 0;  // bf16 input, weight and output of the largest forward GEMM
  for (const model::GemmShape& g : model::training_gemm_shapes(cfg, B, T)) {
    gemm = std::max<int64_t>(gemm, 2 * (g.M * g.K + g.N * g.K + g.M * g.N) + 3 * 256);
  }
  return bytes(cfg, B, T, microbatches, parallel, recompute).total() + gemm + (int64_t{64} << 20);
}

namespace {
PipelineWiring wiring_of(kernels::Backend& backend, const DeviceParallel& p, int B, int T) {
  PipelineWiring w;
  w.backend = &backend;
  w.B = B;
  w.T = T;
  w.pp_rank = p.pp_rank;
  w.tp = {p.tp > 1 ? p.tp_data : nullptr, p.sequence_parallel};
  w.boundary = p.pp_data;
  w.pp = p.pp_group;
  w.dp = p.dp_group;
  return w;
}
}  // namespace

DeviceTrainer::DeviceTrainer(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                             int microbatches, optim::AdamWConfig adamw, DeviceParallel parallel,
                             model::Recompute recompute)
    : PipelineStages(cfg, plan(cfg, microbatches, parallel).schedule,
                     wiring_of(backend, parallel, B, T)),
      par_(parallel),
      unit_pool_(std::make_unique<optim::UnitPool>(backend)) {
  WEFT_CHECK(microbatches >= 1, "a step needs at least one microbatch");
  const bool holds_wte = par_.pp_rank == 0 || par_.pp_rank == par_.pp - 1;
  WEFT_CHECK(par_.pp == 1 || (par_.pp_group != nullptr && par_.pp_data != nullptr &&
                              (par_.embedding_data != nullptr || !holds_wte)),
             "a device pipeline of ", par_.pp, " ranks needs its pp group, and its first and last ",
             "ranks their embedding group");
  WEFT_CHECK((par_.dp_group == nullptr) == (par_.dp_data == nullptr),
             "the replicas need both their host and their data communicator");
  WEFT_CHECK(par_.tp == 1 || (par_.tp_data != nullptr && par_.tp_data->size() == par_.tp &&
                              (par_.pp == 1 || par_.model_group != nullptr)),
             "tensor parallelism of ", par_.tp, " needs its tp group (and with a pipeline, the ",
             "replica's model group)");
  groups_ = {par_.model_group != nullptr ? par_.model_group : par_.pp_group, par_.embedding_data,
             par_.dp_group};
  const int stages = schedule().shape.num_stages();
  for (int j = 0; j < PipelineStages::num_chunks(); ++j) {
    model::ParamStorage storage = optim::DistributedOptimizer::storage(par_.zero, dp_size());
    storage.deferred_weight_grads = par_.schedule == schedule::Kind::ZeroBubbleH1;
    auto model = std::make_unique<model::Gpt>(
        cfg, B, T, recompute,
        parallel::TensorParallel{par_.tp > 1 ? par_.tp_data : nullptr, par_.sequence_parallel},
        model::pipeline_stage(cfg, stage_of_chunk(j), stages), slots_of_chunk(j), storage,
        &backend);
    owned_opts_.push_back(std::make_unique<optim::DistributedOptimizer>(
        *model, par_.dp_data, par_.zero, adamw, unit_pool_.get()));
    opts_.push_back(owned_opts_.back().get());
    add_chunk(std::move(model));
  }
}

DeviceTrainer::~DeviceTrainer() = default;

void DeviceTrainer::init(uint64_t seed) {
  for (optim::DistributedOptimizer* opt : opts_) opt->init(seed);
}

DeviceParallel device_parallel(
    const parallel::ProcessGroups& groups, int tp, int pp, int dp, int pp_rank, int vp,
    schedule::Kind schedule, const std::function<comm::Communicator*(comm::Communicator&)>& data) {
  auto on_backend = [&](comm::Communicator* host) -> comm::Communicator* {
    return host != nullptr && host->size() > 1 ? data(*host) : nullptr;
  };
  auto host_group = [](comm::Communicator* g) {
    return g != nullptr && g->size() > 1 ? g : nullptr;
  };
  DeviceParallel p;
  p.tp = tp;
  p.pp = pp;
  p.vp = vp;
  p.pp_rank = pp_rank;
  p.schedule = schedule;
  p.pp_group = pp > 1 ? host_group(groups.pp.get()) : nullptr;
  p.dp_group = dp > 1 ? host_group(groups.dp.get()) : nullptr;
  p.model_group = host_group(groups.model.get());
  p.tp_data = tp > 1 ? on_backend(groups.tp.get()) : nullptr;
  p.pp_data = on_backend(p.pp_group);
  p.dp_data = on_backend(p.dp_group);
  p.embedding_data = pp > 1 ? on_backend(groups.embedding.get()) : nullptr;
  return p;
}

void DeviceTrainer::before_weight_pass(int j, bool final) { opts_.at(j)->set_final_pass(final); }

StepStats DeviceTrainer::finish(float loss) {
  return finish_step(chunks(), opts_, groups_, loss, lr_, clip_);
}

StepStats DeviceTrainer::step(const int32_t* tokens, const int32_t* targets, float lr,
                              double clip_norm) {
  lr_ = lr;
  clip_ = clip_norm;
  return run_step(tokens, targets);
}

void DeviceTrainer::download_state(int j, float* params, float* m, float* v) const {
  optim::DistributedOptimizer& o = *opts_.at(j);
  const int64_t n = model(j).param_layout().buffer.total();
  WEFT_CHECK(o.zero() == 0, "whole-chunk state is ZeRO 0's");
  o.read_state(0, 0, n, params);
  o.read_state(1, 0, n, m);
  o.read_state(2, 0, n, v);
}

void DeviceTrainer::upload_state(int j, const float* params, const float* m, const float* v,
                                 int step_count) {
  optim::DistributedOptimizer& o = *opts_.at(j);
  const int64_t n = model(j).param_layout().buffer.total();
  WEFT_CHECK(o.zero() == 0, "whole-chunk state is ZeRO 0's");
  o.write_state(0, 0, n, params);
  o.write_state(1, 0, n, m);
  o.write_state(2, 0, n, v);
  o.state_loaded(step_count);
}

double device_gemm_ceiling(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                           int reps) {
  double flops = 0, seconds = 0;
  for (const model::GemmShape& g : model::training_gemm_shapes(cfg, B, T)) {
    if (g.trans_a || !g.trans_b) continue;  // the forward shapes: [M,K] @ [N,K]^T
    const double s = backend.linear_forward_seconds(static_cast<int>(g.M), static_cast<int>(g.K),
                                                    static_cast<int>(g.N), reps);
    flops += g.flops();
    seconds += s * g.count;
  }
  return seconds > 0 ? flops / seconds : 0.0;
}

}  // namespace weft::runtime
