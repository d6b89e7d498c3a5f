#include "weft/runtime/pipeline_stages.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "weft/core/check.h"
#include "weft/kernels/backend.h"
#include "weft/schedule/schedule.h"

namespace weft::runtime {

namespace {
// Adds the seconds of its scope to `total`.
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double& total) : total_(total) {}
  ~ScopedSeconds() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

std::vector<model::ChunkMemory> rank_chunks(const model::GptConfig& cfg,
                                            const schedule::Schedule& schedule, int pp_rank) {
  const schedule::Shape& sh = schedule.shape;
  const std::vector<int> peak = schedule::peak_in_flight_per_chunk(schedule, pp_rank);
  std::vector<model::ChunkMemory> chunks;
  for (int j = 0; j < sh.vp; ++j) {
    const int stage = sh.stage_of(pp_rank, j);
    chunks.push_back({model::pipeline_stage(cfg, stage, sh.num_stages()), std::max(1, peak[j]),
                      stage > 0 && sh.rank_of(stage - 1) != pp_rank});
  }
  return chunks;
}

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
  chunk_shapes_ = rank_chunks(cfg_, schedule_, wiring_.pp_rank);
}

PipelineStages::~PipelineStages() {
  // Sends still in flight read the chunks' buffers: let them finish. Not while an error unwinds
  // (the peer may never receive; the job is ending) and never by throwing from here.
  if (std::uncaught_exceptions() > 0) return;
  for (auto& c : chunks_) {
    for (auto* works : {&c->sends, &c->grad_sends}) {
      for (auto& w : *works) {
        try {
          w.wait();
        } catch (const std::exception&) {
        }
      }
    }
  }
}

bool PipelineStages::sends_grads(int j) const { return chunk_shapes_.at(j).sends_grads; }

void PipelineStages::add_chunk(std::unique_ptr<model::Gpt> model) {
  const int j = static_cast<int>(chunks_.size());
  WEFT_CHECK(j < num_chunks(), "more chunks than the schedule's ", num_chunks());
  auto c = std::make_unique<Chunk>();
  c->stage = stage_of_chunk(j);
  WEFT_CHECK(
      model->slots() == slots_of_chunk(j) &&
          model->stage().first_layer == model::pipeline_stage(cfg_, c->stage, S_).first_layer,
      "chunk ", j, " is not built for stage ", c->stage);
  c->model = std::move(model);
  c->slots = MicrobatchSlots(m_, c->model->slots(), c->stage);
  c->sends.resize(c->model->slots());
  kernels::Backend& be = c->model->backend();
  WEFT_CHECK(&be == &backend_, "chunk ", j, " is not on the runtime's backend");
  act_bytes_ = be.act_bytes();
  if (sends_grads(j)) {
    for (int k = 0; k < m_; ++k) {
      c->grad_out.push_back(static_cast<kernels::Act*>(be.allocate(boundary_bytes())));
    }
  }
  c->grad_sends.resize(m_);
  const int tp = wiring_.tp.size();
  if (j == 0 && tp > 1 && !wiring_.tp.sequence_parallel && schedule_.shape.pp > 1) {
    part_elements_ = boundary_elements() / tp;
    part_ = static_cast<kernels::Act*>(be.allocate(part_elements_ * be.act_bytes()));
  }
  const int64_t step_elements = int64_t{m_} * wiring_.B * wiring_.T;
  if (c->model->stage().embedding) step_tokens_ = be.allocate<int32_t>(step_elements);
  if (c->model->stage().head) {
    step_targets_ = be.allocate<int32_t>(step_elements);
    step_losses_ = be.allocate<float>(step_elements);
  }
  models_.push_back(c->model.get());
  chunks_.push_back(std::move(c));
}

PipelineStages::Chunk& PipelineStages::chunk(int stage) {
  WEFT_CHECK(stage >= 0 && stage < S_ && schedule_.shape.rank_of(stage) == wiring_.pp_rank,
             "stage ", stage, " is not on pipeline rank ", wiring_.pp_rank);
  return *chunks_.at(schedule_.shape.chunk_of(stage));
}

int PipelineStages::acquire(Chunk& c, int mb) {
  const bool taken = c.slots.of(mb) < 0;
  const int slot = c.slots.acquire(mb);
  // A slot just taken may still have its output on the way to the next stage, whose receive is
  // posted: that stage ran its forward before this slot's backward could end.
  if (taken) c.sends[slot].order();
  return slot;
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
  const int slot = acquire(c, mb);
  const int64_t block = int64_t{wiring_.B} * wiring_.T;
  if (stage > 0 && schedule_.shape.rank_of(stage - 1) == wiring_.pp_rank) {
    // The previous stage is on this rank (pp = 1): hand its output over in memory.
    Chunk& prev = chunk(stage - 1);
    copy_boundary(c.model->stage_input(slot), prev.model->stage_output(prev.slots.of(mb)));
  }
  const model::DeviceBatch on_device{
      .tokens = step_tokens_ != nullptr ? step_tokens_ + mb * block : nullptr,
      .targets = step_targets_ != nullptr ? step_targets_ + mb * block : nullptr,
      .losses = stage == S_ - 1 ? step_losses_ + mb * block : nullptr};
  c.model->forward(tokens_ + mb * block, targets_ + mb * block, wiring_.B, wiring_.T, slot,
                   loss_scale(), on_device);
}

// B (split = false): the whole backward, then the slot is free. I (split = true): input
// gradients only; the slot stays until W has computed the weight gradients from it.
void PipelineStages::run_backward(int stage, int mb, bool split) {
  Chunk& c = chunk(stage);
  const int slot = c.slots.of(mb);
  WEFT_CHECK(slot >= 0, "backward of stage ", stage, " microbatch ", mb, " before its forward");
  if (!split) before_weight_pass(schedule_.shape.chunk_of(stage), ++c.weight_passes == m_);
  c.model->backward(slot, /*defer_weight_grads=*/split);
  if (stage > 0) {
    // Keep d(stage input) until it is sent (or hand it to the previous stage on this rank).
    if (schedule_.shape.rank_of(stage - 1) == wiring_.pp_rank) {
      Chunk& prev = chunk(stage - 1);
      copy_boundary(prev.model->output_grad(prev.slots.of(mb)), c.model->input_grad());
    } else {
      copy_boundary(c.grad_out[mb], c.model->input_grad());
    }
  }
  if (!split) c.slots.release(mb);
}

void PipelineStages::backward(int stage, int mb) { run_backward(stage, mb, false); }
void PipelineStages::backward_input(int stage, int mb) { run_backward(stage, mb, true); }

void PipelineStages::backward_weight(int stage, int mb) {
  Chunk& c = chunk(stage);
  WEFT_CHECK(c.slots.of(mb) >= 0, "W of stage ", stage, " microbatch ", mb, " before its I");
  before_weight_pass(schedule_.shape.chunk_of(stage), ++c.weight_passes == m_);
  c.model->backward_weights(c.slots.of(mb));
  c.slots.release(mb);
}

void PipelineStages::send_activation(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  const int slot = c.slots.of(mb);
  c.sends[slot].order();
  c.sends[slot] = send_rows(c.model->stage_output(slot), peer, tag(stage + 1, mb, false));
}

void PipelineStages::recv_activation(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  recv_rows(c.model->stage_input(acquire(c, mb)), peer, tag(stage, mb, false));
}

void PipelineStages::send_grad(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  c.grad_sends[mb] = send_rows(c.grad_out[mb], peer, tag(stage - 1, mb, true));
}

void PipelineStages::recv_grad(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  const int slot = c.slots.of(mb);
  WEFT_CHECK(slot >= 0, "gradient for stage ", stage, " microbatch ", mb, " before its forward");
  recv_rows(c.model->output_grad(slot), peer, tag(stage, mb, true));
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
  for (auto& c : chunks_) {
    for (auto& w : c->grad_sends) w.order();
  }
  // The loss lives on the last stage's rank: every microbatch's mean, from one copy of the step's
  // losses; every rank gets the mean (over the replicas too).
  double loss_sum = 0;
  if (step_losses_ != nullptr) {
    const int N = wiring_.B * wiring_.T;
    std::vector<float> losses(static_cast<size_t>(m_) * N);
    backend_.download(losses.data(), step_losses_, static_cast<int64_t>(losses.size()) * 4);
    for (int mb = 0; mb < m_; ++mb) {
      loss_sum += model::Gpt::mean_loss(losses.data() + int64_t{mb} * N, targets_ + mb * N, N);
    }
  }
  const double loss = replica_sum(loss_sum) / dp_size();  // each replica's mean over m_
  stats_ = finish(static_cast<float>(loss / m_));
}

StepStats PipelineStages::run_step(const int32_t* tokens, const int32_t* targets) {
  WEFT_CHECK(static_cast<int>(chunks_.size()) == num_chunks(), "the trainer built ", chunks_.size(),
             " of its ", num_chunks(), " chunks");
  tokens_ = tokens;
  targets_ = targets;
  const int64_t step_bytes = int64_t{m_} * wiring_.B * wiring_.T * 4;
  if (step_tokens_ != nullptr) backend_.upload(step_tokens_, tokens, step_bytes);
  if (step_targets_ != nullptr) backend_.upload(step_targets_, targets, step_bytes);
  stats_ = {};
  timing_ = {};
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& c : chunks_) {
    c->model->zero_grad();
    c->weight_passes = 0;
  }
  execute(schedule_.programs.at(wiring_.pp_rank), *this);
  timing_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats_;
}

float PipelineStages::evaluate(const int32_t* tokens, const int32_t* targets, int batches,
                               int total) {
  // Forward only, stage after stage: a rank receives a stage's input, runs it, sends its output
  // (asynchronously), so every rank walks the stages in the same order without waiting in a cycle.
  const int64_t block = int64_t{wiring_.B} * wiring_.T;
  const schedule::Shape& sh = schedule_.shape;
  double loss = 0;
  for (int k = 0; k < batches; ++k) {
    for (int s = 0; s < S_; ++s) {
      if (sh.rank_of(s) != wiring_.pp_rank) continue;
      Chunk& c = chunk(s);
      c.sends[0].order();
      if (s > 0) {
        const int from = sh.rank_of(s - 1);
        if (from == wiring_.pp_rank) {
          Chunk& prev = chunk(s - 1);
          copy_boundary(c.model->stage_input(0), prev.model->stage_output(0));
        } else {
          recv_rows(c.model->stage_input(0), from, tag(s, k % m_, false));
        }
      }
      const float l =
          c.model->forward(tokens + k * block, targets + k * block, wiring_.B, wiring_.T, 0, 0.0f);
      if (s == S_ - 1) loss += l;
      if (s < S_ - 1 && sh.rank_of(s + 1) != wiring_.pp_rank) {
        c.sends[0] =
            send_rows(c.model->stage_output(0), sh.rank_of(s + 1), tag(s + 1, k % m_, false));
      }
    }
  }
  for (auto& c : chunks_) c->sends[0].order();
  return static_cast<float>(replica_sum(loss) / total);  // the replicas' batches, each once
}

}  // namespace weft::runtime
