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
  if (p.vp > 1 && p.pp == 1) {
    s.add("vp=" + std::to_string(p.vp) + " chunks need a pipeline (pp > 1) on devices");
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
  return model::estimate_rank_memory(
      cfg, B, T, recompute, 1, {parallel.tp, parallel.sequence_parallel}, chunks, microbatches,
      parallel.pp > 1, parallel.schedule == schedule::Kind::ZeroBubbleH1, {}, 0,
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
PipelineWiring wiring_of(const DeviceParallel& p, int B, int T, int microbatches) {
  PipelineWiring w;
  w.B = B;
  w.T = T;
  w.pp_rank = p.pp_rank;
  w.tp = {p.tp > 1 ? p.tp_data : nullptr, p.sequence_parallel};
  w.boundary = p.pp_data;
  w.pp = p.pp_group;
  w.dp = p.dp_group;
  // Gradients of the replicas' mean loss: summed over the dp group at the end of the step.
  const int dp = p.dp_group != nullptr ? p.dp_group->size() : 1;
  w.loss_scale = 1.0f / static_cast<float>(microbatches * dp);
  return w;
}
}  // namespace

DeviceTrainer::DeviceTrainer(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                             int microbatches, optim::AdamWConfig adamw, DeviceParallel parallel,
                             model::Recompute recompute)
    : PipelineStages(cfg, plan(cfg, microbatches, parallel).schedule,
                     wiring_of(parallel, B, T, microbatches)),
      backend_(backend),
      adamw_(adamw),
      par_(parallel) {
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
  std::vector<kernels::Backend::AdamWSegment> segments;
  const int stages = schedule().shape.num_stages();
  for (int j = 0; j < PipelineStages::num_chunks(); ++j) {
    model::ParamStorage storage;
    storage.deferred_weight_grads = par_.schedule == schedule::Kind::ZeroBubbleH1;
    auto model = std::make_unique<model::Gpt>(
        cfg, B, T, recompute,
        parallel::TensorParallel{par_.tp > 1 ? par_.tp_data : nullptr, par_.sequence_parallel},
        model::pipeline_stage(cfg, stage_of_chunk(j), stages), slots_of_chunk(j), storage,
        &backend_);
    const model::ParamLayout& layout = model->param_layout();
    const int64_t n = layout.buffer.total();
    m_.push_back(backend_.allocate<float>(n));
    v_.push_back(backend_.allocate<float>(n));
    backend_.zero(m_.back(), n * 4);
    backend_.zero(v_.back(), n * 4);
    // One segment per tensor: AdamW decays matrices and embeddings only (ParamInit::weight_decay).
    const auto& slices = layout.buffer.slices();
    for (size_t i = 0; i < slices.size(); ++i) {
      const int64_t o = slices[i].offset;
      BF16* read = model->read_copy();
      segments.push_back({model->params().data() + o, model->grads().data() + o, m_.back() + o,
                          v_.back() + o, read != nullptr ? read + o : nullptr, slices[i].numel,
                          layout.init[i].weight_decay ? adamw.weight_decay : 0.0f});
    }
    add_chunk(std::move(model));
  }
  plan_ = backend_.plan_adamw(segments);
}

DeviceTrainer::~DeviceTrainer() = default;

void DeviceTrainer::init(uint64_t seed) {
  for (model::Gpt* m : chunks()) m->init(seed);
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

StepStats DeviceTrainer::finish(float loss) {
  const int dp = dp_size();
  backend_.synchronize();
  std::vector<std::vector<model::GradPart>> parts(chunks().size());
  std::vector<NormChunk> norm_chunks;
  for (size_t j = 0; j < chunks().size(); ++j) {
    model::Gpt& m = *chunks()[j];
    // Sequence parallelism: each tp rank's LayerNorm gradients cover its rows only.
    m.finish_grad_sync();
    // The replicas' mean gradient (ZeRO 0: each holds all of it; the forward scaled each by
    // 1/dp), in one all-reduce of the chunk's buffer.
    if (dp > 1) par_.dp_data->all_reduce(m.grads().data(), m.param_layout().buffer.total());
    // The tied embedding (Press & Wolf 2017): the first and the last stage each get the sum of
    // the two copies' gradients, so the copies stay equal.
    if (par_.pp > 1 && (m.stage().embedding || m.stage().head)) {
      backend_.synchronize();
      const SliceSpec& wte = m.param_layout().buffer.at("wte");
      par_.embedding_data->all_reduce(m.grads().ptr("wte"), wte.numel);
    }
    const auto& slices = m.param_layout().buffer.slices();
    for (size_t i = 0; i < slices.size(); ++i) {
      parts[j].push_back({i, m.grads().data() + slices[i].offset, slices[i].numel});
    }
    norm_chunks.push_back({&m.param_layout(), m.stage(), m.tensor_parallel().rank(), parts[j]});
  }
  // The backend's sum of squares over runs of adjacent slices, merged across the zero padding
  // between them (model::Gpt zeroes it once): one call, one wait, per run.
  auto sum_squares = [&](std::span<const model::GradPart> counted) {
    double sum = 0;
    for (size_t i = 0; i < counted.size();) {
      size_t k = i + 1;
      while (k < counted.size() && counted[k].slice == counted[k - 1].slice + 1) ++k;
      const float* begin = counted[i].grad;
      sum += backend_.sum_squares(begin, counted[k - 1].grad + counted[k - 1].n - begin);
      i = k;
    }
    return sum;
  };
  StepStats stats;
  stats.loss = loss;
  // Summed over the replica's ranks; the replicas hold the same whole gradients (ZeRO 0).
  const GradNorm norm = global_grad_norm(
      norm_chunks, sum_squares, par_.model_group != nullptr ? par_.model_group : par_.pp_group,
      nullptr, loss, clip_);
  stats.grad_norm = norm.norm;
  stats.skipped = norm.skipped;
  if (stats.skipped) return stats;
  ++t_;
  plan_->step(lr_, adamw_.beta1, adamw_.beta2, adamw_.eps, t_, norm.clip);
  return stats;
}

StepStats DeviceTrainer::step(const int32_t* tokens, const int32_t* targets, float lr,
                              double clip_norm) {
  lr_ = lr;
  clip_ = clip_norm;
  return run_step(tokens, targets);
}

void DeviceTrainer::download_state(int j, int group, int64_t at, int64_t n, float* out) const {
  const model::Gpt& g = model(j);
  WEFT_CHECK(
      group >= 0 && group < 3 && at >= 0 && n >= 0 && at + n <= g.param_layout().buffer.total(),
      "download_state: group ", group, " elements [", at, ", ", at + n, ") of chunk ", j);
  const float* src = group == 0 ? g.params().data() : group == 1 ? m_.at(j) : v_.at(j);
  backend_.download(out, src + at, n * 4);
}

void DeviceTrainer::upload_state(int j, int group, int64_t at, int64_t n, const float* in) {
  model::Gpt& g = model(j);
  WEFT_CHECK(
      group >= 0 && group < 3 && at >= 0 && n >= 0 && at + n <= g.param_layout().buffer.total(),
      "upload_state: group ", group, " elements [", at, ", ", at + n, ") of chunk ", j);
  float* dst = group == 0 ? g.params().data() : group == 1 ? m_.at(j) : v_.at(j);
  backend_.upload(dst + at, in, n * 4);
  if (group == 0) g.refresh_read_copy(at, n);
}

void DeviceTrainer::download_state(int j, float* params, float* m, float* v) const {
  const int64_t n = model(j).param_layout().buffer.total();
  download_state(j, 0, 0, n, params);
  download_state(j, 1, 0, n, m);
  download_state(j, 2, 0, n, v);
}

void DeviceTrainer::upload_state(int j, const float* params, const float* m, const float* v,
                                 int step_count) {
  const int64_t n = model(j).param_layout().buffer.total();
  upload_state(j, 0, 0, n, params);
  upload_state(j, 1, 0, n, m);
  upload_state(j, 2, 0, n, v);
  t_ = step_count;
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
