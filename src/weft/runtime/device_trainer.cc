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

DeviceTrainer::DeviceTrainer(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                             int microbatches, optim::AdamWConfig adamw, DeviceParallel parallel,
                             model::Recompute recompute)
    : backend_(backend), cfg_(cfg), B_(B), T_(T), m_(microbatches), adamw_(adamw), par_(parallel) {
  WEFT_CHECK(m_ >= 1, "a step needs at least one microbatch");
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
  Plan p = plan(cfg_, m_, par_);
  schedule_ = std::move(p.schedule);
  S_ = par_.pp * par_.vp;
  std::vector<kernels::Backend::AdamWSegment> segments;
  chunks_.resize(p.stages.size());
  for (size_t j = 0; j < p.stages.size(); ++j) {
    Chunk& c = chunks_[j];
    c.stage = par_.pp_rank + static_cast<int>(j) * par_.pp;
    c.model = std::make_unique<model::Gpt>(
        cfg_, B_, T_, recompute,
        parallel::TensorParallel{par_.tp > 1 ? par_.tp_data : nullptr, par_.sequence_parallel},
        p.stages[j], p.slots[j],
        model::ParamStorage{.deferred_weight_grads = par_.schedule == schedule::Kind::ZeroBubbleH1},
        &backend_);
    const model::ParamLayout& layout = c.model->param_layout();
    const int64_t n = layout.buffer.total();
    c.m = backend_.allocate<float>(n);
    c.v = backend_.allocate<float>(n);
    backend_.zero(c.m, n * 4);
    backend_.zero(c.v, n * 4);
    if (c.stage > 0) {
      for (int k = 0; k < m_; ++k) {
        c.grad_out.push_back(static_cast<kernels::Act*>(backend_.allocate(boundary_bytes())));
      }
    }
    c.slots = MicrobatchSlots(m_, c.model->slots(), c.stage);
    // One segment per tensor: AdamW decays matrices and embeddings only (ParamInit::weight_decay).
    const auto& slices = layout.buffer.slices();
    for (size_t i = 0; i < slices.size(); ++i) {
      const int64_t o = slices[i].offset;
      BF16* read = c.model->read_copy();
      segments.push_back({c.model->params().data() + o, c.model->grads().data() + o, c.m + o,
                          c.v + o, read != nullptr ? read + o : nullptr, slices[i].numel,
                          layout.init[i].weight_decay ? adamw.weight_decay : 0.0f});
    }
  }
  plan_ = backend_.plan_adamw(segments);
}

DeviceTrainer::~DeviceTrainer() {
  // Sends still in flight read device buffers: let them finish. Not while an error unwinds (the
  // peer may never receive; the job is ending) and never by throwing from here.
  if (std::uncaught_exceptions() > 0) return;
  for (comm::Work& w : sends_) {
    try {
      w.wait();
    } catch (const std::exception&) {
    }
  }
}

void DeviceTrainer::init(uint64_t seed) {
  for (Chunk& c : chunks_) c.model->init(seed);
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

DeviceTrainer::Chunk& DeviceTrainer::chunk(int stage) {
  const schedule::Shape& sh = schedule_.shape;
  WEFT_CHECK(stage >= 0 && stage < S_ && sh.rank_of(stage) == par_.pp_rank, "stage ", stage,
             " is not on pipeline rank ", par_.pp_rank);
  return chunks_[sh.chunk_of(stage)];
}

int DeviceTrainer::tag(int stage, int mb, bool grad) const {
  return stage_message_tag(stage, mb, m_, grad);
}

// A stage's input or output on this rank: [Ns, C] activations (Ns = B*T, or B*T/tp with sequence
// parallelism).
int64_t DeviceTrainer::boundary_bytes() const {
  const int64_t N = int64_t{B_} * T_,
                rows = par_.sequence_parallel && par_.tp > 1 ? N / par_.tp : N;
  return rows * cfg_.n_embd * backend_.act_bytes();
}

int DeviceTrainer::dp_size() const { return par_.dp_group != nullptr ? par_.dp_group->size() : 1; }

double DeviceTrainer::replica_sum(double x) const {
  if (par_.pp_group != nullptr) par_.pp_group->all_reduce(&x, 1);
  if (par_.dp_group != nullptr) par_.dp_group->all_reduce(&x, 1);
  return x;
}

void DeviceTrainer::forward(int stage, int mb) {
  Chunk& c = chunk(stage);
  const int slot = c.slots.acquire(mb);
  const int64_t block = int64_t{B_} * T_;
  // Gradients of the replicas' mean loss: summed over the dp group at the end of the step.
  const float loss = c.model->forward(tokens_ + mb * block, targets_ + mb * block, B_, T_, slot,
                                      1.0f / static_cast<float>(m_ * dp_size()));
  if (stage == S_ - 1) loss_sum_ += loss;
}

// B (split = false): the whole backward, then the slot is free. I (split = true): input
// gradients only; the slot stays until W has computed the weight gradients from it (ZB-H1).
void DeviceTrainer::run_backward(int stage, int mb, bool split) {
  Chunk& c = chunk(stage);
  const int slot = c.slots.of(mb);
  WEFT_CHECK(slot >= 0, "backward of stage ", stage, " microbatch ", mb, " before its forward");
  c.model->backward(slot, /*defer_weight_grads=*/split);
  // Keep d(stage input) until it is sent: the slot and the workspace are reused before that.
  if (!c.grad_out.empty()) {
    backend_.copy(c.grad_out[mb], c.model->input_grad(), boundary_bytes());
  }
  if (!split) {
    ++c.backward_passes;
    c.slots.release(mb);
  }
}

void DeviceTrainer::backward(int stage, int mb) { run_backward(stage, mb, false); }
void DeviceTrainer::backward_input(int stage, int mb) { run_backward(stage, mb, true); }

void DeviceTrainer::backward_weight(int stage, int mb) {
  Chunk& c = chunk(stage);
  WEFT_CHECK(c.slots.of(mb) >= 0, "W of stage ", stage, " microbatch ", mb, " before its I");
  c.model->backward_weights(c.slots.of(mb));
  ++c.backward_passes;
  c.slots.release(mb);
}

void DeviceTrainer::send_activation(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  backend_.synchronize();  // the communicator may run on another stream, or on the host
  sends_.push_back(par_.pp_data->send_async(c.model->stage_output(c.slots.of(mb)), boundary_bytes(),
                                            comm::DataType::U8, peer, tag(stage + 1, mb, false)));
}

void DeviceTrainer::recv_activation(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  par_.pp_data->recv(reinterpret_cast<uint8_t*>(c.model->stage_input(c.slots.acquire(mb))),
                     boundary_bytes(), peer, tag(stage, mb, false));
}

void DeviceTrainer::send_grad(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  backend_.synchronize();
  sends_.push_back(par_.pp_data->send_async(c.grad_out.at(mb), boundary_bytes(), comm::DataType::U8,
                                            peer, tag(stage - 1, mb, true)));
}

void DeviceTrainer::recv_grad(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  const int slot = c.slots.of(mb);
  WEFT_CHECK(slot >= 0, "gradient for stage ", stage, " microbatch ", mb, " before its forward");
  par_.pp_data->recv(reinterpret_cast<uint8_t*>(c.model->output_grad(slot)), boundary_bytes(), peer,
                     tag(stage, mb, true));
}

void DeviceTrainer::reduce_grads(int stage) {
  const Chunk& c = chunk(stage);
  WEFT_CHECK(c.backward_passes == m_, "ReduceGrads of stage ", stage, " after ", c.backward_passes,
             " of its ", m_, " backward passes");
}

void DeviceTrainer::optimizer_step() {
  // Every send of the step was issued before this: waiting for them cannot cycle.
  for (comm::Work& w : sends_) w.wait();
  sends_.clear();
  const int dp = dp_size();
  backend_.synchronize();
  std::vector<std::vector<model::GradPart>> parts(chunks_.size());
  std::vector<NormChunk> norm_chunks;
  for (size_t j = 0; j < chunks_.size(); ++j) {
    model::Gpt& m = *chunks_[j].model;
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
  const double loss = replica_sum(loss_sum_) / dp;  // each replica's sum over its m_ microbatches
  stats_.loss = static_cast<float>(loss / m_);
  // Summed over the replica's ranks; the replicas hold the same whole gradients (ZeRO 0).
  const GradNorm norm = global_grad_norm(
      norm_chunks, sum_squares, par_.model_group != nullptr ? par_.model_group : par_.pp_group,
      nullptr, stats_.loss, clip_);
  stats_.grad_norm = norm.norm;
  stats_.skipped = norm.skipped;
  if (stats_.skipped) return;
  ++t_;
  plan_->step(lr_, adamw_.beta1, adamw_.beta2, adamw_.eps, t_, norm.clip);
}

StepStats DeviceTrainer::step(const int32_t* tokens, const int32_t* targets, float lr,
                              double clip_norm) {
  tokens_ = tokens;
  targets_ = targets;
  lr_ = lr;
  clip_ = clip_norm;
  loss_sum_ = 0;
  stats_ = {};
  for (Chunk& c : chunks_) {
    c.model->zero_grad();
    c.backward_passes = 0;
  }
  execute(schedule_.programs.at(par_.pp_rank), *this);
  return stats_;
}

float DeviceTrainer::evaluate(const int32_t* tokens, const int32_t* targets, int batches,
                              int total) {
  // Forward only, stage after stage: a rank receives a stage's input, runs it and sends its
  // output on, so every rank walks the stages in the same order and no wait can cycle.
  const int64_t block = int64_t{B_} * T_;
  double loss = 0;
  for (int k = 0; k < batches; ++k) {
    for (int s = 0; s < S_; ++s) {
      if (s % par_.pp != par_.pp_rank) continue;
      Chunk& c = chunk(s);
      if (s > 0) {
        par_.pp_data->recv(reinterpret_cast<uint8_t*>(c.model->stage_input(0)), boundary_bytes(),
                           (s - 1) % par_.pp, tag(s, k % m_, false));
      }
      const float l = c.model->forward(tokens + k * block, targets + k * block, B_, T_, 0, 0.0f);
      if (s == S_ - 1) loss += l;
      if (s < S_ - 1) {
        backend_.synchronize();
        par_.pp_data->send(reinterpret_cast<const uint8_t*>(c.model->stage_output(0)),
                           boundary_bytes(), (s + 1) % par_.pp, tag(s + 1, k % m_, false));
      }
    }
  }
  return static_cast<float>(replica_sum(loss) / total);  // the replicas' batches, each once
}

void DeviceTrainer::download_state(int j, int group, int64_t at, int64_t n, float* out) const {
  const Chunk& c = chunks_.at(j);
  WEFT_CHECK(group >= 0 && group < 3 && at >= 0 && n >= 0 &&
                 at + n <= c.model->param_layout().buffer.total(),
             "download_state: group ", group, " elements [", at, ", ", at + n, ") of chunk ", j);
  const float* src = group == 0 ? c.model->params().data() : group == 1 ? c.m : c.v;
  backend_.download(out, src + at, n * 4);
}

void DeviceTrainer::upload_state(int j, int group, int64_t at, int64_t n, const float* in) {
  Chunk& c = chunks_.at(j);
  WEFT_CHECK(group >= 0 && group < 3 && at >= 0 && n >= 0 &&
                 at + n <= c.model->param_layout().buffer.total(),
             "upload_state: group ", group, " elements [", at, ", ", at + n, ") of chunk ", j);
  float* dst = group == 0 ? c.model->params().data() : group == 1 ? c.m : c.v;
  backend_.upload(dst + at, in, n * 4);
  if (group == 0) c.model->refresh_read_copy(at, n);
}

void DeviceTrainer::download_state(int j, float* params, float* m, float* v) const {
  const int64_t n = chunks_.at(j).model->param_layout().buffer.total();
  download_state(j, 0, 0, n, params);
  download_state(j, 1, 0, n, m);
  download_state(j, 2, 0, n, v);
}

void DeviceTrainer::upload_state(int j, const float* params, const float* m, const float* v,
                                 int step_count) {
  const int64_t n = chunks_.at(j).model->param_layout().buffer.total();
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
