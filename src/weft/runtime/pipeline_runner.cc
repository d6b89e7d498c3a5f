#include "weft/runtime/pipeline_runner.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "weft/core/check.h"
#include "weft/core/clock.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/kernels.h"
#include "weft/layout/rank.h"
#include "weft/model/gemm_shapes.h"
#include "weft/schedule/schedule.h"

namespace weft::runtime {
namespace {

// What a rank of `schedule` allocates as PipelineRunner builds it (model::estimate_rank_memory over
// layout::rank_program): its predicted_memory(), and device_bytes before the runner exists.
model::MemoryEstimate rank_memory(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                                  const model::RankShape& shape,
                                  const model::MemoryCounting& counting) {
  return model::estimate_rank_memory(cfg, shape, layout::rank_program(cfg, schedule, shape.pp_rank),
                                     counting);
}

}  // namespace

Result<schedule::Schedule> runner_schedule(const model::GptConfig& cfg, schedule::Kind kind, int pp,
                                           int vp, int microbatches) {
  const Status valid = model::validate_pipeline(cfg, pp, vp);
  if (!valid.ok()) return valid;
  auto made = schedule::make_schedule(kind, {.pp = pp, .vp = vp, .microbatches = microbatches});
  if (!made.ok()) return made.status();
  return schedule::add_optimizer_step(schedule::add_communication(std::move(made).value()));
}

PipelineOptions pipeline_options(const parallel::ProcessGroups& groups,
                                 const model::RankShape& shape, optim::AdamWConfig adamw,
                                 kernels::Backend* backend, const DataGroups& data) {
  PipelineOptions o{.backend = backend, .shape = shape, .adamw = adamw};
  o.shape.tp.sequence_parallel = shape.tp.sequence_parallel && shape.tp.tp > 1;
  if (!data) {  // the host groups carry the data
    o.tp = groups.tp.get();
    o.pp = groups.pp.get();
    o.dp = groups.dp.get();
    o.groups = {groups.model.get(), groups.embedding.get()};
    return o;
  }
  // A group of one rank has nothing to exchange: none (a device's buffers never go through a host
  // group). The data groups are asked for in one order on every rank: tp, pp, dp, embedding.
  auto host = [](comm::Communicator* g) { return g != nullptr && g->size() > 1 ? g : nullptr; };
  auto on_backend = [&](comm::Communicator* g) { return host(g) != nullptr ? data(*g) : nullptr; };
  o.tp = on_backend(groups.tp.get());
  o.pp = host(groups.pp.get());
  o.dp = host(groups.dp.get());
  o.pp_data = on_backend(o.pp);
  o.dp_data = on_backend(o.dp);
  o.groups = {host(groups.model.get()), on_backend(groups.embedding.get())};
  return o;
}

PipelineRunner::PipelineRunner(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                               PipelineOptions options)
    : own_backend_(options.backend == nullptr ? kernels::make_host_backend(Precision::FP32)
                                              : nullptr),
      backend_(options.backend != nullptr ? *options.backend : *own_backend_),
      cfg_(cfg),
      schedule_(schedule),
      o_(options),
      boundary_(o_.pp_data != nullptr ? o_.pp_data : o_.pp),
      unit_pool_(std::make_unique<optim::UnitPool>(backend_)) {
  const schedule::Shape& sh = schedule_.shape;
  S_ = sh.num_stages();
  m_ = sh.microbatches;
  const model::RankShape& r = o_.shape;
  WEFT_CHECK(r.pp_rank >= 0 && r.pp_rank < sh.pp, "pp rank ", r.pp_rank, " of ", sh.pp);
  const auto size = [](comm::Communicator* g) { return g != nullptr ? g->size() : 1; };
  WEFT_CHECK(size(o_.tp) == r.tp.tp && size(o_.dp) == r.zero.dp, "tp = ", r.tp.tp,
             " and dp = ", r.zero.dp, " but the groups have ", size(o_.tp), " and ", size(o_.dp),
             " ranks");
  WEFT_CHECK(sh.pp == 1 || (boundary_ != nullptr && boundary_->size() == sh.pp &&
                            o_.pp != nullptr && o_.pp->size() == sh.pp),
             "a pipeline of ", sh.pp, " ranks needs its pp groups");
  o_.groups.replicas = o_.dp;
  o_.groups.boundary = boundary_;
  rank_ = layout::rank_program(cfg_, schedule_, r.pp_rank);
  for (int p = 0; p < static_cast<int>(rank_.slots.size()); ++p) {
    pools_.emplace_back(sh.vp, m_, rank_.slots[p], p);
  }
  act_bytes_ = backend_.act_bytes();
  acts_out_ = SendPool(backend_, rank_.act_buffers, boundary_bytes());
  grads_out_ = SendPool(backend_, rank_.grad_buffers, boundary_bytes());
  if (on_this_rank(S_ - 1)) step_loss_ = backend_.allocate<double>(1);

  optim::ParamStorage storage = optim::DistributedOptimizer::storage(r.zero.stage, r.zero.dp);
  storage.deferred_weight_grads = schedule_.kind == schedule::Kind::ZeroBubbleH1;
  for (int j = 0; j < num_chunks(); ++j) {
    auto c = std::make_unique<Chunk>();
    c->index = j;
    c->stage = sh.stage_of(r.pp_rank, j);
    c->slots = &pools_.at(rank_.chunks.at(j).pool);
    c->model = std::make_unique<model::Gpt>(
        cfg_, r.B, r.T, r.recompute, tp(), model::pipeline_stage(cfg_, c->stage, S_),
        rank_.slots.at(rank_.chunks.at(j).pool), storage, &backend_, slot_owner(j));
    c->opt = std::make_unique<optim::DistributedOptimizer>(
        *c->model, o_.dp_data != nullptr ? o_.dp_data : o_.dp, r.zero.stage, o_.adamw,
        unit_pool_.get());
    if (j == 0 && r.tp.tp > 1 && !r.tp.sequence_parallel && sh.pp > 1) {
      part_elements_ = boundary_elements() / r.tp.tp;
      part_ = static_cast<kernels::Act*>(backend_.allocate(part_elements_ * act_bytes_));
    }
    models_.push_back(c->model.get());
    opts_.push_back(c->opt.get());
    chunks_.push_back(std::move(c));
  }
}

PipelineRunner::~PipelineRunner() {
  // Sends still in flight read the send buffers: let them finish. Not while an error unwinds
  // (the peer may never receive; the job is ending) and never by throwing from here.
  if (std::uncaught_exceptions() > 0) return;
  acts_out_.drain();
  grads_out_.drain();
}

const model::Gpt* PipelineRunner::slot_owner(int j) const {
  for (int k = 0; k < j; ++k) {
    if (rank_.chunks.at(k).pool == rank_.chunks.at(j).pool) return chunks_.at(k)->model.get();
  }
  return nullptr;
}

model::MemoryEstimate device_bytes(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                                   const model::RankShape& shape) {
  // The one memory model, as the runner predicts itself (rank_memory), in the arena's units.
  return rank_memory(cfg, schedule, shape,
                     {.precision = Precision::BF16Mixed, .threads = 1, .runtime_bytes = 0});
}

int64_t device_arena_bytes(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                           const model::RankShape& shape) {
  int64_t gemm = 0;  // bf16 input, weight and output of the largest forward GEMM
  for (const model::GemmShape& g : model::training_gemm_shapes(cfg, shape.B, shape.T)) {
    gemm = std::max<int64_t>(gemm, 2 * (g.M * g.K + g.N * g.K + g.M * g.N) + 3 * 256);
  }
  return device_bytes(cfg, schedule, shape).total() + gemm + (int64_t{64} << 20);
}

double device_gemm_ceiling(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T) {
  double flops = 0, seconds = 0;
  for (const model::GemmShape& g : model::training_gemm_shapes(cfg, B, T)) {
    if (g.trans_a || !g.trans_b) continue;  // the forward shapes: [M,K] @ [N,K]^T
    const double s = backend.linear_forward_seconds(static_cast<int>(g.M), static_cast<int>(g.K),
                                                    static_cast<int>(g.N), /*reps=*/5);
    flops += g.flops();
    seconds += s * g.count;
  }
  return seconds > 0 ? flops / seconds : 0.0;
}

model::MemoryEstimate PipelineRunner::predicted_memory(bool snapshot) const {
  return rank_memory(cfg_, schedule_, o_.shape,
                     {.precision = backend_.precision(),
                      .threads = kernels::num_threads(),
                      .runtime_bytes = kernels::host_runtime_bytes(),
                      .snapshot = snapshot});
}

void PipelineRunner::init(uint64_t seed) {
  for (optim::DistributedOptimizer* opt : opts_) opt->init(seed);
}

StepStats PipelineRunner::step(const int32_t* tokens, const int32_t* targets, float lr,
                               double clip_norm, const BeforeUpdate& before_update) {
  lr_ = lr;
  clip_ = clip_norm;
  before_update_ = &before_update;
  tokens_ = tokens;
  targets_ = targets;
  if (step_loss_ != nullptr) backend_.zero(step_loss_, sizeof(double));
  stats_ = {};
  timing_ = {};
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& c : chunks_) {
    c->model->zero_grad();
    c->weight_passes = 0;
  }
  execute(schedule_.programs.at(o_.shape.pp_rank), *this);
  timing_.seconds = seconds_since(t0);
  return stats_;
}

}  // namespace weft::runtime
