#include "weft/runtime/pipeline_runner.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "weft/core/check.h"
#include "weft/kernels/kernels.h"
#include "weft/schedule/schedule.h"

namespace weft::runtime {

namespace {
// The chunks are fp32 host models (no backend given: each its own host fp32 backend), whose
// activations are floats in host memory.
float* host(kernels::Act* p) { return reinterpret_cast<float*>(p); }
const float* host(const kernels::Act* p) { return reinterpret_cast<const float*>(p); }

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

struct PipelineRunner::Chunk {
  int stage = 0;
  std::unique_ptr<model::Gpt> model;
  std::unique_ptr<optim::DistributedOptimizer> opt;
  int weight_passes = 0;  // backward (or W) passes of this step so far
  MicrobatchSlots slots;
  std::vector<comm::Work> sends;  // per slot: the last activation send from the slot's output
  // Per microbatch: d(stage input), kept until its send completes at the end of the step. Not per
  // slot: a slot is reused as soon as its backward ends, maybe before the previous rank posts the
  // matching receive, and waiting for it then could deadlock a rendezvous-size message.
  std::vector<std::vector<float>> grad_out;
  std::vector<comm::Work> grad_sends;
};

PipelineRunner::PipelineRunner(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                               PipelineOptions options)
    : cfg_(cfg), schedule_(schedule), o_(options) {
  const schedule::Shape& sh = schedule_.shape;
  S_ = sh.num_stages();
  m_ = sh.microbatches;
  WEFT_CHECK(o_.pp_rank >= 0 && o_.pp_rank < sh.pp, "pp rank ", o_.pp_rank, " of ", sh.pp);
  WEFT_CHECK(sh.pp == 1 || (o_.pp != nullptr && o_.pp->size() == sh.pp), "a pipeline of ", sh.pp,
             " ranks needs its pp group");
  const std::vector<int> slots = schedule::peak_in_flight_per_chunk(schedule_, o_.pp_rank);
  const int tp = o_.tp.size();
  const bool scatter = tp > 1 && !o_.tp.sequence_parallel && sh.pp > 1;
  for (int j = 0; j < sh.vp; ++j) {
    auto c = std::make_unique<Chunk>();
    c->stage = sh.stage_of(o_.pp_rank, j);
    model::ParamStorage storage = optim::DistributedOptimizer::storage(o_.zero, dp_size());
    storage.deferred_weight_grads = schedule_.kind == schedule::Kind::ZeroBubbleH1;
    c->model = std::make_unique<model::Gpt>(cfg_, o_.B, o_.T, o_.recompute, o_.tp,
                                            model::pipeline_stage(cfg_, c->stage, S_),
                                            std::max(1, slots[j]), storage);
    c->opt = std::make_unique<optim::DistributedOptimizer>(*c->model, o_.dp, o_.zero, o_.adamw,
                                                           &unit_pool_);
    c->slots = MicrobatchSlots(m_, c->model->slots(), c->stage);
    c->sends.resize(c->model->slots());
    // d(input) goes to another rank only from a stage whose predecessor is remote.
    if (c->stage > 0 && sh.rank_of(c->stage - 1) != o_.pp_rank) {
      c->grad_out.assign(m_, std::vector<float>(boundary_elements()));
    }
    c->grad_sends.resize(m_);
    chunk_models_.push_back(c->model.get());
    chunk_opts_.push_back(c->opt.get());
    chunks_.push_back(std::move(c));
  }
  if (scatter) scatter_buf_.resize(int64_t{o_.B} * o_.T / tp * cfg_.n_embd);
}

PipelineRunner::~PipelineRunner() {
  // Sends still in flight read the slots' buffers: let them finish. Not while an error unwinds
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

model::MemoryEstimate PipelineRunner::predicted_memory() const {
  std::vector<model::ChunkMemory> chunks;
  for (const auto& c : chunks_) {
    chunks.push_back({c->model->stage(), c->model->slots(), !c->grad_out.empty()});
  }
  return model::estimate_rank_memory(
      cfg_, o_.B, o_.T, o_.recompute, kernels::num_threads(),
      {o_.tp.size(), o_.tp.sequence_parallel}, chunks, m_, schedule_.shape.pp > 1,
      schedule_.kind == schedule::Kind::ZeroBubbleH1, {o_.zero, dp_size()});
}

void PipelineRunner::init(uint64_t seed) {
  for (auto& c : chunks_) c->opt->init(seed);
}

PipelineRunner::Chunk& PipelineRunner::chunk(int stage) {
  WEFT_CHECK(stage >= 0 && stage < S_ && schedule_.shape.rank_of(stage) == o_.pp_rank, "stage ",
             stage, " is not on pipeline rank ", o_.pp_rank);
  return *chunks_[schedule_.shape.chunk_of(stage)];
}

int PipelineRunner::acquire(Chunk& c, int mb) {
  const bool taken = c.slots.of(mb) < 0;
  const int slot = c.slots.acquire(mb);
  // A slot just taken may still have its output on the way to the next stage, whose receive is
  // posted: that stage ran its forward before this slot's backward could end.
  if (taken) c.sends[slot].wait();
  return slot;
}

int PipelineRunner::dp_size() const { return o_.dp != nullptr ? o_.dp->size() : 1; }

// A loss summed on the last stage's rank: on every rank, and the mean over the replicas.
double PipelineRunner::replica_sum(double loss) const {
  if (o_.pp != nullptr && o_.pp->size() > 1) o_.pp->all_reduce(&loss, 1);
  if (dp_size() > 1) o_.dp->all_reduce(&loss, 1);
  return loss;
}

int64_t PipelineRunner::boundary_elements() const {
  const int64_t N = int64_t{o_.B} * o_.T, tp = o_.tp.size();
  return (o_.tp.sequence_parallel && tp > 1 ? N / tp : N) * cfg_.n_embd;
}

int PipelineRunner::tag(int stage, int mb, bool grad) const {
  return stage_message_tag(stage, mb, m_, grad);
}

// A boundary tensor: whole, or with scatter/gather this tp rank's 1/tp of its rows.
comm::Work PipelineRunner::send_rows(const float* full, int peer, int tag) {
  if (!scatter_buf_.empty()) {
    const int64_t part = static_cast<int64_t>(scatter_buf_.size());
    return o_.pp->send_async(full + o_.tp.rank() * part, part, comm::DataType::F32, peer, tag);
  }
  return o_.pp->send_async(full, boundary_elements(), comm::DataType::F32, peer, tag);
}

void PipelineRunner::recv_rows(float* full, int peer, int tag) {
  const ScopedSeconds waiting(timing_.waiting);
  if (!scatter_buf_.empty()) {
    const int64_t part = static_cast<int64_t>(scatter_buf_.size());
    o_.pp->recv(scatter_buf_.data(), part, peer, tag);
    o_.tp.comm->all_gather(full, scatter_buf_.data(), part);
    return;
  }
  o_.pp->recv(full, boundary_elements(), peer, tag);
}

void PipelineRunner::forward(int stage, int mb) {
  Chunk& c = chunk(stage);
  const int slot = acquire(c, mb);
  const int64_t block = int64_t{o_.B} * o_.T;
  if (stage > 0 && schedule_.shape.rank_of(stage - 1) == o_.pp_rank) {
    // The previous stage is on this rank (pp = 1): hand its output over in memory.
    Chunk& prev = chunk(stage - 1);
    const float* out = host(prev.model->stage_output(prev.slots.of(mb)));
    std::copy(out, out + boundary_elements(), host(c.model->stage_input(slot)));
  }
  const float loss = c.model->forward(tokens_ + mb * block, targets_ + mb * block, o_.B, o_.T, slot,
                                      1.0f / static_cast<float>(m_));
  if (stage == S_ - 1) loss_sum_ += loss;
}

// B (split = false): the whole backward, then the slot is free. I (split = true): input
// gradients only; the slot stays until W has computed the weight gradients from it.
void PipelineRunner::run_backward(int stage, int mb, bool split) {
  Chunk& c = chunk(stage);
  const int slot = c.slots.of(mb);
  WEFT_CHECK(slot >= 0, "backward of stage ", stage, " microbatch ", mb, " before its forward");
  if (!split) c.opt->set_final_pass(++c.weight_passes == m_);
  c.model->backward(slot, /*defer_weight_grads=*/split);
  if (stage > 0) {
    // Keep d(stage input) until it is sent (or hand it to the previous stage on this rank).
    const int64_t n = boundary_elements();
    if (schedule_.shape.rank_of(stage - 1) == o_.pp_rank) {
      Chunk& prev = chunk(stage - 1);
      std::copy_n(host(c.model->input_grad()), n, host(prev.model->output_grad(prev.slots.of(mb))));
    } else {
      std::copy_n(host(c.model->input_grad()), n, c.grad_out[mb].data());
    }
  }
  if (!split) c.slots.release(mb);
}

void PipelineRunner::backward(int stage, int mb) { run_backward(stage, mb, false); }
void PipelineRunner::backward_input(int stage, int mb) { run_backward(stage, mb, true); }

void PipelineRunner::backward_weight(int stage, int mb) {
  Chunk& c = chunk(stage);
  WEFT_CHECK(c.slots.of(mb) >= 0, "W of stage ", stage, " microbatch ", mb, " before its I");
  c.opt->set_final_pass(++c.weight_passes == m_);
  c.model->backward_weights(c.slots.of(mb));
  c.slots.release(mb);
}

void PipelineRunner::send_activation(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  const int slot = c.slots.of(mb);
  c.sends[slot].wait();
  c.sends[slot] = send_rows(host(c.model->stage_output(slot)), peer, tag(stage + 1, mb, false));
}

void PipelineRunner::recv_activation(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  recv_rows(host(c.model->stage_input(acquire(c, mb))), peer, tag(stage, mb, false));
}

void PipelineRunner::send_grad(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  c.grad_sends[mb] = send_rows(c.grad_out[mb].data(), peer, tag(stage - 1, mb, true));
}

void PipelineRunner::recv_grad(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  const int slot = c.slots.of(mb);
  WEFT_CHECK(slot >= 0, "gradient for stage ", stage, " microbatch ", mb, " before its forward");
  recv_rows(host(c.model->output_grad(slot)), peer, tag(stage, mb, true));
}

void PipelineRunner::reduce_grads(int stage) {
  // The chunk's last backward pass has started every reduction of its gradients, unit by unit
  // (optim::DistributedOptimizer::grads_ready); the optimizer step waits for them.
  const Chunk& c = chunk(stage);
  WEFT_CHECK(c.weight_passes == m_, "ReduceGrads of stage ", stage, " after ", c.weight_passes,
             " of its ", m_, " backward passes");
}

void PipelineRunner::optimizer_step() {
  // Every send of the step was issued before this: waiting for them cannot cycle.
  for (auto& c : chunks_) {
    for (auto& w : c->grad_sends) w.wait();
  }
  // The loss lives on the last stage's rank: every rank gets the mean (over the replicas too).
  const double loss = replica_sum(loss_sum_) / dp_size();  // each replica's mean over m_
  stats_ = finish_step(chunk_models_, chunk_opts_, o_.groups, static_cast<float>(loss / m_), lr_,
                       clip_, *before_update_);
}

StepStats PipelineRunner::step(const int32_t* tokens, const int32_t* targets, float lr,
                               double clip_norm, const BeforeUpdate& before_update) {
  tokens_ = tokens;
  targets_ = targets;
  lr_ = lr;
  clip_ = clip_norm;
  before_update_ = &before_update;
  loss_sum_ = 0;
  timing_ = {};
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& c : chunks_) {
    c->model->zero_grad();
    c->weight_passes = 0;
  }
  execute(schedule_.programs.at(o_.pp_rank), *this);
  timing_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats_;
}

float PipelineRunner::evaluate(const int32_t* tokens, const int32_t* targets, int batches,
                               int total) {
  // Forward only, stage after stage: a rank receives a stage's input, runs it, sends its output
  // (asynchronously), so every rank walks the stages in the same order without waiting in a cycle.
  const int64_t block = int64_t{o_.B} * o_.T;
  double loss = 0;
  for (int k = 0; k < batches; ++k) {
    for (int s = 0; s < S_; ++s) {
      if (schedule_.shape.rank_of(s) != o_.pp_rank) continue;
      Chunk& c = chunk(s);
      c.sends[0].wait();
      if (s > 0) {
        const int from = schedule_.shape.rank_of(s - 1);
        if (from == o_.pp_rank) {
          Chunk& prev = chunk(s - 1);
          std::copy_n(host(prev.model->stage_output(0)), boundary_elements(),
                      host(c.model->stage_input(0)));
        } else {
          recv_rows(host(c.model->stage_input(0)), from, tag(s, k % m_, false));
        }
      }
      const float l = c.model->forward(tokens + k * block, targets + k * block, o_.B, o_.T, 0);
      if (s == S_ - 1) loss += l;
      if (s < S_ - 1 && schedule_.shape.rank_of(s + 1) != o_.pp_rank) {
        c.sends[0] = send_rows(host(c.model->stage_output(0)), schedule_.shape.rank_of(s + 1),
                               tag(s + 1, k % m_, false));
      }
    }
  }
  for (auto& c : chunks_) c->sends[0].wait();
  return static_cast<float>(replica_sum(loss) / total);  // the replicas' batches, each once
}

}  // namespace weft::runtime
