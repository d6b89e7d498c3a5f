#include "weft/runtime/pipeline_stages.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "weft/core/check.h"
#include "weft/core/clock.h"
#include "weft/kernels/backend.h"
#include "weft/layout/rank.h"
#include "weft/schedule/schedule.h"

namespace weft::runtime {

namespace {
// Adds the seconds of its scope to `total`.
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double& total) : total_(total) {}
  ~ScopedSeconds() { total_ += seconds_since(start_); }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

PipelineStages::PipelineStages(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                               PipelineWiring wiring)
    : own_backend_(wiring.backend == nullptr ? kernels::make_host_backend(Precision::FP32)
                                             : nullptr),
      backend_(wiring.backend != nullptr ? *wiring.backend : *own_backend_),
      cfg_(cfg),
      schedule_(schedule),
      wiring_(wiring) {
  const schedule::Shape& sh = schedule_.shape;
  S_ = sh.num_stages();
  m_ = sh.microbatches;
  WEFT_CHECK(wiring_.pp_rank >= 0 && wiring_.pp_rank < sh.pp, "pp rank ", wiring_.pp_rank, " of ",
             sh.pp);
  WEFT_CHECK(sh.pp == 1 || (wiring_.boundary != nullptr && wiring_.boundary->size() == sh.pp &&
                            wiring_.pp != nullptr && wiring_.pp->size() == sh.pp),
             "a pipeline of ", sh.pp, " ranks needs its pp groups");
  rank_ = layout::rank_program(cfg_, schedule_, wiring_.pp_rank);
  for (int p = 0; p < static_cast<int>(rank_.slots.size()); ++p) {
    pools_.emplace_back(sh.vp, m_, rank_.slots[p], p);
  }
  act_bytes_ = backend_.act_bytes();
  acts_out_ = SendPool(backend_, rank_.act_buffers, boundary_bytes());
  grads_out_ = SendPool(backend_, rank_.grad_buffers, boundary_bytes());
  if (on_this_rank(S_ - 1)) step_loss_ = backend_.allocate<double>(1);
}

PipelineStages::~PipelineStages() {
  // Sends still in flight read the send buffers: let them finish. Not while an error unwinds
  // (the peer may never receive; the job is ending) and never by throwing from here.
  if (std::uncaught_exceptions() > 0) return;
  acts_out_.drain();
  grads_out_.drain();
}

void PipelineStages::add_chunk(std::unique_ptr<model::Gpt> model) {
  const int j = static_cast<int>(chunks_.size());
  WEFT_CHECK(j < num_chunks(), "more chunks than the schedule's ", num_chunks());
  auto c = std::make_unique<Chunk>();
  c->index = j;
  c->stage = stage_of_chunk(j);
  WEFT_CHECK(
      model->slots() == slots_of_chunk(j) &&
          model->stage().first_layer == model::pipeline_stage(cfg_, c->stage, S_).first_layer,
      "chunk ", j, " is not built for stage ", c->stage);
  c->model = std::move(model);
  c->slots = &pools_.at(rank_.chunks.at(j).pool);
  kernels::Backend& be = c->model->backend();
  WEFT_CHECK(&be == &backend_, "chunk ", j, " is not on the runtime's backend");
  const int tp = wiring_.tp.size();
  if (j == 0 && tp > 1 && !wiring_.tp.sequence_parallel && schedule_.shape.pp > 1) {
    part_elements_ = boundary_elements() / tp;
    part_ = static_cast<kernels::Act*>(be.allocate(part_elements_ * be.act_bytes()));
  }
  models_.push_back(c->model.get());
  chunks_.push_back(std::move(c));
}

const model::Gpt* PipelineStages::slot_owner(int j) const {
  for (int k = 0; k < j; ++k) {
    if (rank_.chunks.at(k).pool == rank_.chunks.at(j).pool) return chunks_.at(k)->model.get();
  }
  return nullptr;
}

PipelineStages::Chunk& PipelineStages::chunk(int stage) {
  WEFT_CHECK(stage >= 0 && stage < S_ && on_this_rank(stage), "stage ", stage,
             " is not on pipeline rank ", wiring_.pp_rank);
  return *chunks_.at(schedule_.shape.chunk_of(stage));
}

// A loss summed on the last stage's rank: on every rank, and the mean over the replicas.
double PipelineStages::replica_sum(double loss) const {
  if (wiring_.pp != nullptr && wiring_.pp->size() > 1) wiring_.pp->all_reduce(&loss, 1);
  if (dp_size() > 1) wiring_.dp->all_reduce(&loss, 1);
  return loss;
}

int64_t PipelineStages::boundary_elements() const {
  const int64_t N = int64_t{wiring_.B} * wiring_.T, tp = wiring_.tp.size();
  return (wiring_.tp.sequence_parallel && tp > 1 ? N / tp : N) * cfg_.n_embd;
}

int64_t PipelineStages::boundary_bytes() const { return boundary_elements() * act_bytes_; }

int PipelineStages::tag(int stage, int mb, bool grad) const {
  return stage_message_tag(stage, mb, m_, grad);
}

void PipelineStages::copy_boundary(kernels::Act* dst, const kernels::Act* src) {
  backend_.copy(dst, src, boundary_bytes());
}

// A boundary tensor: whole, or with scatter/gather this tp rank's 1/tp of its rows. fp32 goes as
// floats, bf16 as bf16 elements (the planner's volume counts elements of the activation type).
comm::Work PipelineStages::send_rows(const kernels::Act* full, int peer, int tag) {
  if (part_ != nullptr) {
    const comm::Payload part = payload(part_elements_);
    return wiring_.boundary->send_async(
        kernels::act_offset(full, wiring_.tp.rank() * part_elements_, act_bytes_), part.count,
        part.type, peer, tag);
  }
  const comm::Payload whole = payload(boundary_elements());
  return wiring_.boundary->send_async(full, whole.count, whole.type, peer, tag);
}

void PipelineStages::recv_rows(kernels::Act* full, int peer, int tag) {
  const ScopedSeconds waiting(timing_.waiting);
  if (part_ != nullptr) {
    const comm::Payload part = payload(part_elements_);
    wiring_.boundary->recv_async(part_, part.count, part.type, peer, tag).order();
    wiring_.tp.comm->all_gather_async(full, part_, part.count, part.type).order();
    return;
  }
  const comm::Payload whole = payload(boundary_elements());
  wiring_.boundary->recv_async(full, whole.count, whole.type, peer, tag).order();
}

void PipelineStages::forward(int stage, int mb) {
  Chunk& c = chunk(stage);
  const int slot = c.acquire(mb);
  if (stage > 0 && on_this_rank(stage - 1)) {
    // The previous stage is on this rank (pp = 1): its output, from the send buffer.
    copy_boundary(c.model->stage_input(slot), acts_out_.held(stage - 1, mb));
    acts_out_.read(stage - 1, mb);
  }
  kernels::Act* output = stage < S_ - 1 ? acts_out_.take(stage, mb) : nullptr;
  const int64_t block = int64_t{wiring_.B} * wiring_.T;
  c.model->forward(tokens_ + mb * block, targets_ + mb * block, wiring_.B, wiring_.T, slot,
                   loss_scale(),
                   {.output = output, .loss_sum = stage == S_ - 1 ? step_loss_ : nullptr});
}

// B (split = false): the whole backward, then the slot is free. I (split = true): input
// gradients only; the slot stays until W has computed the weight gradients from it.
void PipelineStages::run_backward(int stage, int mb, bool split) {
  Chunk& c = chunk(stage);
  const int slot = c.slot_of(mb);
  WEFT_CHECK(slot >= 0, "backward of stage ", stage, " microbatch ", mb, " before its forward");
  if (stage < S_ - 1) {
    if (on_this_rank(stage + 1)) {  // pp = 1: the next stage's input gradient, from its buffer
      copy_boundary(c.model->output_grad(), grads_out_.held(stage + 1, mb));
      grads_out_.read(stage + 1, mb);
    } else {  // recv_grad wrote it into the workspace right before this
      WEFT_CHECK(received_grad_ == std::make_pair(stage, mb), "backward of stage ", stage,
                 " microbatch ", mb, " right after receiving another output gradient");
      received_grad_ = {-1, -1};
    }
  }
  if (!split) before_weight_pass(schedule_.shape.chunk_of(stage), ++c.weight_passes == m_);
  c.model->backward(slot, /*defer_weight_grads=*/split);
  // d(stage input) into a send buffer, for the previous stage (its rank, or this one).
  if (stage > 0) copy_boundary(grads_out_.take(stage, mb), c.model->input_grad());
  if (!split) c.release(mb);
}

void PipelineStages::backward(int stage, int mb) { run_backward(stage, mb, false); }
void PipelineStages::backward_input(int stage, int mb) { run_backward(stage, mb, true); }

void PipelineStages::backward_weight(int stage, int mb) {
  Chunk& c = chunk(stage);
  WEFT_CHECK(c.slot_of(mb) >= 0, "W of stage ", stage, " microbatch ", mb, " before its I");
  before_weight_pass(schedule_.shape.chunk_of(stage), ++c.weight_passes == m_);
  c.model->backward_weights(c.slot_of(mb));
  c.release(mb);
}

void PipelineStages::send_activation(int stage, int mb, int peer) {
  acts_out_.sending(stage, mb,
                    send_rows(acts_out_.held(stage, mb), peer, tag(stage + 1, mb, false)));
}

void PipelineStages::recv_activation(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  recv_rows(c.model->stage_input(c.acquire(mb)), peer, tag(stage, mb, false));
}

void PipelineStages::send_grad(int stage, int mb, int peer) {
  grads_out_.sending(stage, mb,
                     send_rows(grads_out_.held(stage, mb), peer, tag(stage - 1, mb, true)));
}

void PipelineStages::recv_grad(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  WEFT_CHECK(c.slot_of(mb) >= 0, "gradient for stage ", stage, " microbatch ", mb,
             " before its forward");
  recv_rows(c.model->output_grad(), peer, tag(stage, mb, true));
  received_grad_ = {stage, mb};
}

void PipelineStages::reduce_grads(int stage) {
  // The chunk's last backward pass has run (and, for the host trainer, started every reduction of
  // its gradients, unit by unit: optim::DistributedOptimizer::grads_ready); the step's end waits.
  const Chunk& c = chunk(stage);
  WEFT_CHECK(c.weight_passes == m_, "ReduceGrads of stage ", stage, " after ", c.weight_passes,
             " of its ", m_, " backward passes");
}

void PipelineStages::optimizer_step() {
  // Every send of the step was issued before this: waiting for them cannot cycle.
  acts_out_.finish_step();
  grads_out_.finish_step();
  // The loss lives on the last stage's rank: the sum of every microbatch's mean loss, added in
  // microbatch order in the backend's memory, read once; every rank gets the mean (over the
  // replicas too).
  double loss_sum = 0;
  if (step_loss_ != nullptr) backend_.download(&loss_sum, step_loss_, sizeof(double));
  const double loss = replica_sum(loss_sum) / dp_size();  // each replica's mean over m_
  stats_ = finish(static_cast<float>(loss / m_));
}

StepStats PipelineStages::run_step(const int32_t* tokens, const int32_t* targets) {
  WEFT_CHECK(static_cast<int>(chunks_.size()) == num_chunks(), "the trainer built ", chunks_.size(),
             " of its ", num_chunks(), " chunks");
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
  execute(schedule_.programs.at(wiring_.pp_rank), *this);
  timing_.seconds = seconds_since(t0);
  return stats_;
}

float PipelineStages::evaluate(const int32_t* tokens, const int32_t* targets, int batches,
                               int total) {
  // Forward only, stage after stage: a rank receives a stage's input, runs it, sends its output
  // (asynchronously, from a send buffer), so every rank walks the stages in the same order without
  // waiting in a cycle; a send buffer's next turn waits only for a send whose receiver comes
  // earlier in that order.
  const int64_t block = int64_t{wiring_.B} * wiring_.T;
  const schedule::Shape& sh = schedule_.shape;
  double loss = 0;
  for (int k = 0; k < batches; ++k) {
    for (int s = 0; s < S_; ++s) {
      if (!on_this_rank(s)) continue;
      Chunk& c = chunk(s);
      if (s > 0 && on_this_rank(s - 1)) {
        copy_boundary(c.model->stage_input(0), acts_out_.held(s - 1, k));
        acts_out_.read(s - 1, k);
      } else if (s > 0) {
        recv_rows(c.model->stage_input(0), sh.rank_of(s - 1), tag(s, k % m_, false));
      }
      kernels::Act* output = s < S_ - 1 ? acts_out_.take(s, k) : nullptr;
      const float l = c.model->forward(tokens + k * block, targets + k * block, wiring_.B,
                                       wiring_.T, 0, 0.0f, {.output = output});
      if (s == S_ - 1) loss += l;
      if (s < S_ - 1 && !on_this_rank(s + 1)) {
        acts_out_.sending(s, k, send_rows(output, sh.rank_of(s + 1), tag(s + 1, k % m_, false)));
      }
    }
  }
  acts_out_.finish_step();
  return static_cast<float>(replica_sum(loss) / total);  // the replicas' batches, each once
}

}  // namespace weft::runtime
