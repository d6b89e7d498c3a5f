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

int64_t rounded(int64_t bytes) { return (bytes + 255) / 256 * 256; }  // a backend block

// This rank's lowered program and its stage's activation slots.
struct Plan {
  schedule::Schedule schedule;
  model::StageSpec stage;
  int slots = 1;
  bool sends_grads = false;  // the stage has a predecessor (on another rank: vp = 1)
};

Plan plan(const model::GptConfig& cfg, int microbatches, const DeviceParallel& p) {
  Status s;
  if (p.schedule == schedule::Kind::Interleaved || p.schedule == schedule::Kind::ZeroBubbleH1) {
    s.add(std::string("schedule ") + std::string(schedule::kind_name(p.schedule)) +
          " is not available on devices yet (gpipe or 1f1b, one model chunk per rank)");
  }
  if (p.pp < 1 || p.pp_rank < 0 || p.pp_rank >= p.pp) {
    s.add("pipeline rank " + std::to_string(p.pp_rank) + " of " + std::to_string(p.pp));
  }
  if (s.ok()) s.merge(model::validate_pipeline(cfg, p.pp, 1));
  s.throw_if_error("invalid device pipeline");
  Plan r;
  r.schedule = schedule::add_optimizer_step(schedule::add_communication(
      schedule::make_schedule(p.schedule, {.pp = p.pp, .vp = 1, .microbatches = microbatches})
          .value_or_throw("invalid device pipeline")));
  r.stage = model::pipeline_stage(cfg, p.pp_rank, p.pp);
  r.slots = std::max(1, schedule::peak_in_flight_per_chunk(r.schedule, p.pp_rank)[0]);
  r.sends_grads = p.pp_rank > 0;
  return r;
}

}  // namespace

model::MemoryEstimate DeviceTrainer::bytes(const model::GptConfig& cfg, int B, int T,
                                           int microbatches, const DeviceParallel& parallel,
                                           model::Recompute recompute) {
  const Plan p = plan(cfg, microbatches, parallel);
  model::MemoryEstimate b = model::MixedGpt::bytes(cfg, B, T, p.stage, p.slots, recompute);
  const int64_t n = model::gpt_param_layout(cfg, 1, 0, p.stage).buffer.total();
  b.optimizer = 2 * rounded(n * 4);  // m and v, allocated as in the constructor
  if (p.sends_grads) b.workspace += microbatches * rounded(int64_t{B} * T * cfg.n_embd * 2);
  return b;
}

int64_t DeviceTrainer::arena_bytes(const model::GptConfig& cfg, int B, int T, int microbatches,
                                   const DeviceParallel& parallel, model::Recompute recompute) {
  int64_t gemm = 0;  // bf16 input, weight and output of the largest forward GEMM
  for (const model::GemmShape& g : model::training_gemm_shapes(cfg, B, T)) {
    gemm = std::max<int64_t>(gemm, 2 * (g.M * g.K + g.N * g.K + g.M * g.N) + 3 * 256);
  }
  return bytes(cfg, B, T, microbatches, parallel, recompute).total() + gemm + (int64_t{64} << 20);
}

DeviceTrainer::DeviceTrainer(kernels::MixedBackend& backend, const model::GptConfig& cfg, int B,
                             int T, int microbatches, optim::AdamWConfig adamw,
                             DeviceParallel parallel, model::Recompute recompute)
    : backend_(backend), cfg_(cfg), B_(B), T_(T), m_(microbatches), adamw_(adamw), par_(parallel) {
  WEFT_CHECK(m_ >= 1, "a step needs at least one microbatch");
  const bool holds_wte = par_.pp_rank == 0 || par_.pp_rank == par_.pp - 1;
  WEFT_CHECK(par_.pp == 1 || (par_.pp_group != nullptr && par_.pp_data != nullptr &&
                              (par_.embedding_data != nullptr || !holds_wte)),
             "a device pipeline of ", par_.pp, " ranks needs its pp group, and its first and last ",
             "ranks their embedding group");
  WEFT_CHECK((par_.dp_group == nullptr) == (par_.dp_data == nullptr),
             "the replicas need both their host and their data communicator");
  Plan p = plan(cfg_, m_, par_);
  schedule_ = std::move(p.schedule);
  model_ = std::make_unique<model::MixedGpt>(backend_, cfg_, B_, T_, p.stage, p.slots, recompute);
  const model::ParamLayout& layout = model_->param_layout();
  const int64_t n = layout.buffer.total();
  m_state_ = backend_.allocate<float>(n);
  v_state_ = backend_.allocate<float>(n);
  backend_.zero(m_state_, n * 4);
  backend_.zero(v_state_, n * 4);
  if (p.sends_grads) {
    for (int k = 0; k < m_; ++k)
      grad_out_.push_back(backend_.allocate<BF16>(int64_t{B} * T * cfg.n_embd));
  }
  slot_of_.assign(m_, -1);
  for (int k = model_->slots() - 1; k >= 0; --k) free_slots_.push_back(k);
  // One segment per tensor: AdamW decays matrices and embeddings only (ParamInit::weight_decay).
  std::vector<kernels::MixedBackend::AdamWSegment> segments;
  const auto& slices = layout.buffer.slices();
  for (size_t i = 0; i < slices.size(); ++i) {
    const int64_t o = slices[i].offset;
    segments.push_back({model_->params() + o, model_->grads() + o, m_state_ + o, v_state_ + o,
                        model_->params16() + o, slices[i].numel,
                        layout.init[i].weight_decay ? adamw.weight_decay : 0.0f});
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

int DeviceTrainer::acquire(int mb) {
  if (slot_of_[mb] >= 0) return slot_of_[mb];
  WEFT_CHECK(!free_slots_.empty(), "stage ", model_->stage().first_layer,
             " has more microbatches in flight than ", model_->slots(), " (its program's peak)");
  slot_of_[mb] = free_slots_.back();
  free_slots_.pop_back();
  return slot_of_[mb];
}

void DeviceTrainer::release(int mb) {
  WEFT_CHECK(slot_of_[mb] >= 0, "microbatch ", mb, " holds no slot");
  free_slots_.push_back(slot_of_[mb]);
  slot_of_[mb] = -1;
}

int DeviceTrainer::tag(int stage, int mb, bool grad) const {
  return (stage * m_ + mb) * 2 + (grad ? 1 : 0);
}

int64_t DeviceTrainer::boundary_bytes() const { return int64_t{B_} * T_ * cfg_.n_embd * 2; }

int DeviceTrainer::dp_size() const { return par_.dp_group != nullptr ? par_.dp_group->size() : 1; }

double DeviceTrainer::replica_sum(double x) const {
  if (par_.pp_group != nullptr) par_.pp_group->all_reduce(&x, 1);
  if (par_.dp_group != nullptr) par_.dp_group->all_reduce(&x, 1);
  return x;
}

void DeviceTrainer::forward(int stage, int mb) {
  const int slot = acquire(mb);
  const int64_t block = int64_t{B_} * T_;
  // Gradients of the replicas' mean loss: summed over the dp group at the end of the step.
  const float loss = model_->forward(tokens_ + mb * block, targets_ + mb * block, B_, T_,
                                     1.0f / static_cast<float>(m_ * dp_size()), slot);
  if (stage == par_.pp - 1) loss_sum_ += loss;
}

void DeviceTrainer::backward(int stage, int mb) {
  const int slot = slot_of_[mb];
  WEFT_CHECK(slot >= 0, "backward of stage ", stage, " microbatch ", mb, " before its forward");
  model_->backward(slot);
  ++backward_passes_;
  // Keep d(stage input) until it is sent: the slot and the workspace are reused before that.
  if (!grad_out_.empty()) backend_.copy(grad_out_[mb], model_->input_grad(), boundary_bytes());
  release(mb);
}

void DeviceTrainer::backward_input(int stage, int mb) {
  WEFT_CHECK(false, "stage ", stage, " microbatch ", mb,
             ": split backward passes (zb-h1) are not available on devices");
}
void DeviceTrainer::backward_weight(int stage, int mb) { backward_input(stage, mb); }

void DeviceTrainer::send_activation(int stage, int mb, int peer) {
  backend_.synchronize();  // the communicator may run on another stream, or on the host
  sends_.push_back(par_.pp_data->send_async(model_->stage_output(slot_of_[mb]), boundary_bytes(),
                                            comm::DataType::U8, peer, tag(stage + 1, mb, false)));
}

void DeviceTrainer::recv_activation(int stage, int mb, int peer) {
  par_.pp_data->recv(reinterpret_cast<uint8_t*>(model_->stage_input(acquire(mb))), boundary_bytes(),
                     peer, tag(stage, mb, false));
}

void DeviceTrainer::send_grad(int stage, int mb, int peer) {
  backend_.synchronize();
  sends_.push_back(par_.pp_data->send_async(grad_out_.at(mb), boundary_bytes(), comm::DataType::U8,
                                            peer, tag(stage - 1, mb, true)));
}

void DeviceTrainer::recv_grad(int stage, int mb, int peer) {
  const int slot = slot_of_[mb];
  WEFT_CHECK(slot >= 0, "gradient for stage ", stage, " microbatch ", mb, " before its forward");
  par_.pp_data->recv(reinterpret_cast<uint8_t*>(model_->output_grad(slot)), boundary_bytes(), peer,
                     tag(stage, mb, true));
}

void DeviceTrainer::reduce_grads(int stage) {
  WEFT_CHECK(backward_passes_ == m_, "ReduceGrads of stage ", stage, " after ", backward_passes_,
             " of its ", m_, " backward passes");
}

void DeviceTrainer::optimizer_step() {
  // Every send of the step was issued before this: waiting for them cannot cycle.
  for (comm::Work& w : sends_) w.wait();
  sends_.clear();
  const int dp = dp_size();
  backend_.synchronize();
  // The replicas' mean gradient (ZeRO 0: each holds all of it; the forward scaled each by 1/dp),
  // in one all-reduce of the buffer.
  if (dp > 1) par_.dp_data->all_reduce(model_->grads(), model_->param_layout().buffer.total());
  // The tied embedding (Press & Wolf 2017): the first and the last stage each get the sum of the
  // two copies' gradients, so the copies stay equal.
  const model::StageSpec& st = model_->stage();
  if (par_.pp > 1 && (st.embedding || st.head)) {
    backend_.synchronize();
    const SliceSpec& wte = model_->param_layout().buffer.at("wte");
    par_.embedding_data->all_reduce(model_->grad("wte"), wte.numel);
  }
  const double loss = replica_sum(loss_sum_) / dp;  // each replica's sum over its m_ microbatches
  stats_.loss = static_cast<float>(loss / m_);
  double sum_squares = model_->grad_sum_squares();
  if (par_.pp_group != nullptr) par_.pp_group->all_reduce(&sum_squares, 1);
  stats_.grad_norm = std::sqrt(sum_squares);
  stats_.skipped = !std::isfinite(stats_.loss) || !std::isfinite(stats_.grad_norm);
  if (stats_.skipped) return;
  ++t_;
  plan_->step(lr_, adamw_.beta1, adamw_.beta2, adamw_.eps, t_,
              optim::clip_factor(stats_.grad_norm, clip_));
}

StepStats DeviceTrainer::step(const int32_t* tokens, const int32_t* targets, float lr,
                              double clip_norm) {
  tokens_ = tokens;
  targets_ = targets;
  lr_ = lr;
  clip_ = clip_norm;
  loss_sum_ = 0;
  backward_passes_ = 0;
  stats_ = {};
  model_->zero_grad();
  execute(schedule_.programs.at(par_.pp_rank), *this);
  return stats_;
}

float DeviceTrainer::evaluate(const int32_t* tokens, const int32_t* targets, int batches,
                              int total) {
  // Forward only, stage after stage: each rank receives its stage's input, runs it and sends its
  // output on, in the same order on every rank, so no wait can cycle.
  const int64_t block = int64_t{B_} * T_;
  const int stage = par_.pp_rank, last = par_.pp - 1;
  double loss = 0;
  for (int k = 0; k < batches; ++k) {
    if (stage > 0) {
      par_.pp_data->recv(reinterpret_cast<uint8_t*>(model_->stage_input(0)), boundary_bytes(),
                         stage - 1, tag(stage, k % m_, false));
    }
    const float l = model_->forward(tokens + k * block, targets + k * block, B_, T_, 0.0f, 0);
    if (stage == last) loss += l;
    if (stage < last) {
      backend_.synchronize();
      par_.pp_data->send(reinterpret_cast<const uint8_t*>(model_->stage_output(0)),
                         boundary_bytes(), stage + 1, tag(stage + 1, k % m_, false));
    }
  }
  return static_cast<float>(replica_sum(loss) / total);  // the replicas' batches, each once
}

void DeviceTrainer::download_state(float* params, float* m, float* v) const {
  const int64_t n = model_->param_layout().buffer.total();
  model_->get_params({params, static_cast<size_t>(n)});
  backend_.download(m, m_state_, n * 4);
  backend_.download(v, v_state_, n * 4);
}

void DeviceTrainer::upload_state(const float* params, const float* m, const float* v,
                                 int step_count) {
  const int64_t n = model_->param_layout().buffer.total();
  model_->set_params({params, static_cast<size_t>(n)});
  backend_.upload(m_state_, m, n * 4);
  backend_.upload(v_state_, v, n * 4);
  t_ = step_count;
}

double device_gemm_ceiling(kernels::MixedBackend& backend, const model::GptConfig& cfg, int B,
                           int T, int reps) {
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
