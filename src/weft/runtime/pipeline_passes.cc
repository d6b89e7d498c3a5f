#include "weft/runtime/pipeline_runner.h"

#include "weft/core/check.h"
#include "weft/core/clock.h"
#include "weft/kernels/backend.h"

namespace weft::runtime {

PipelineRunner::Chunk& PipelineRunner::chunk(int stage) {
  WEFT_CHECK(stage >= 0 && stage < S_ && on_this_rank(stage), "stage ", stage,
             " is not on pipeline rank ", o_.shape.pp_rank);
  return *chunks_.at(schedule_.shape.chunk_of(stage));
}

// A loss summed on the last stage's rank: on every rank, and the mean over the replicas.
double PipelineRunner::replica_sum(double loss) const {
  if (o_.pp != nullptr && o_.pp->size() > 1) o_.pp->all_reduce(&loss, 1);
  if (dp_size() > 1) o_.dp->all_reduce(&loss, 1);
  return loss;
}

int64_t PipelineRunner::boundary_elements() const {
  const int64_t N = int64_t{o_.shape.B} * o_.shape.T, tp = o_.shape.tp.tp;
  return (o_.shape.tp.sequence_parallel && tp > 1 ? N / tp : N) * cfg_.n_embd;
}

void PipelineRunner::read_held(SendPool& pool, int stage, int mb, kernels::Act* dst) {
  backend_.copy(dst, pool.held(stage, mb), boundary_bytes());
  pool.read(stage, mb);
}

// A boundary tensor: whole, or with scatter/gather this tp rank's 1/tp of its rows. fp32 goes as
// floats, bf16 as bf16 elements (the planner's volume counts elements of the activation type).
comm::Work PipelineRunner::send_rows(const kernels::Act* full, int peer, int tag) {
  const int64_t n = part_ != nullptr ? part_elements_ : boundary_elements();
  const kernels::Act* rows =
      part_ != nullptr ? kernels::act_offset(full, tp().rank() * part_elements_, act_bytes_) : full;
  const comm::Payload p = payload(n);
  return boundary_->send_async(rows, p.count, p.type, peer, tag);
}

void PipelineRunner::recv_rows(kernels::Act* full, int peer, int tag) {
  const auto t0 = SteadyClock::now();
  const comm::Payload p = payload(part_ != nullptr ? part_elements_ : boundary_elements());
  boundary_->recv_async(part_ != nullptr ? part_ : full, p.count, p.type, peer, tag).order();
  if (part_ != nullptr) o_.tp->all_gather_async(full, part_, p.count, p.type).order();
  timing_.waiting += seconds_since(t0);
}

void PipelineRunner::forward(int stage, int mb) {
  Chunk& c = chunk(stage);
  const int slot = c.acquire(mb);
  if (stage > 0 && on_this_rank(stage - 1)) {
    // The previous stage is on this rank (pp = 1): its output, from the send buffer.
    read_held(acts_out_, stage - 1, mb, c.model->stage_input(slot));
  }
  kernels::Act* output = stage < S_ - 1 ? acts_out_.take(stage, mb) : nullptr;
  const int64_t block = int64_t{o_.shape.B} * o_.shape.T;
  c.model->forward(tokens_ + mb * block, targets_ + mb * block, o_.shape.B, o_.shape.T, slot,
                   loss_scale(),
                   {.output = output, .loss_sum = stage == S_ - 1 ? step_loss_ : nullptr});
}

// B (split = false): the whole backward, then the slot is free. I (split = true): input
// gradients only; the slot stays until W has computed the weight gradients from it.
void PipelineRunner::run_backward(int stage, int mb, bool split) {
  Chunk& c = chunk(stage);
  const int slot = c.slot_of(mb);
  WEFT_CHECK(slot >= 0, "backward of stage ", stage, " microbatch ", mb, " before its forward");
  if (stage < S_ - 1) {
    if (on_this_rank(stage + 1)) {  // pp = 1: the next stage's input gradient, from its buffer
      read_held(grads_out_, stage + 1, mb, c.model->output_grad());
    } else {  // recv_grad wrote it into the workspace right before this
      WEFT_CHECK(received_grad_ == std::make_pair(stage, mb), "backward of stage ", stage,
                 " microbatch ", mb, " right after receiving another output gradient");
      received_grad_ = {-1, -1};
    }
  }
  if (!split) c.opt->set_final_pass(++c.weight_passes == m_);
  c.model->backward(slot, /*defer_weight_grads=*/split);
  // d(stage input) into a send buffer, for the previous stage (its rank, or this one).
  if (stage > 0) backend_.copy(grads_out_.take(stage, mb), c.model->input_grad(), boundary_bytes());
  if (!split) c.release(mb);
}

void PipelineRunner::backward(int stage, int mb) { run_backward(stage, mb, false); }
void PipelineRunner::backward_input(int stage, int mb) { run_backward(stage, mb, true); }

void PipelineRunner::backward_weight(int stage, int mb) {
  Chunk& c = chunk(stage);
  WEFT_CHECK(c.slot_of(mb) >= 0, "W of stage ", stage, " microbatch ", mb, " before its I");
  c.opt->set_final_pass(++c.weight_passes == m_);
  c.model->backward_weights(c.slot_of(mb));
  c.release(mb);
}

void PipelineRunner::send_activation(int stage, int mb, int peer) {
  acts_out_.sending(stage, mb,
                    send_rows(acts_out_.held(stage, mb), peer, tag(stage + 1, mb, false)));
}

void PipelineRunner::recv_activation(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  recv_rows(c.model->stage_input(c.acquire(mb)), peer, tag(stage, mb, false));
}

void PipelineRunner::send_grad(int stage, int mb, int peer) {
  grads_out_.sending(stage, mb,
                     send_rows(grads_out_.held(stage, mb), peer, tag(stage - 1, mb, true)));
}

void PipelineRunner::recv_grad(int stage, int mb, int peer) {
  Chunk& c = chunk(stage);
  WEFT_CHECK(c.slot_of(mb) >= 0, "gradient for stage ", stage, " microbatch ", mb,
             " before its forward");
  recv_rows(c.model->output_grad(), peer, tag(stage, mb, true));
  received_grad_ = {stage, mb};
}

void PipelineRunner::reduce_grads(int stage) {
  // The chunk's last backward pass has run (and, for the host trainer, started every reduction of
  // its gradients, unit by unit: optim::DistributedOptimizer::grads_ready); the step's end waits.
  const Chunk& c = chunk(stage);
  WEFT_CHECK(c.weight_passes == m_, "ReduceGrads of stage ", stage, " after ", c.weight_passes,
             " of its ", m_, " backward passes");
}

void PipelineRunner::optimizer_step() {
  // Every send of the step was issued before this: waiting for them cannot cycle.
  acts_out_.finish_step();
  grads_out_.finish_step();
  // The loss lives on the last stage's rank: the sum of every microbatch's mean loss, added in
  // microbatch order in the backend's memory, read once; every rank gets the mean (over the
  // replicas too).
  double loss_sum = 0;
  if (step_loss_ != nullptr) backend_.download(&loss_sum, step_loss_, sizeof(double));
  const double loss = replica_sum(loss_sum) / dp_size();  // each replica's mean over m_
  stats_ = finish_step(models_, opts_, o_.groups, static_cast<float>(loss / m_), lr_, clip_,
                       *before_update_);
}

float PipelineRunner::evaluate(const int32_t* tokens, const int32_t* targets, int batches,
                               int total) {
  // Forward only, stage after stage: a rank receives a stage's input, runs it, sends its output
  // (asynchronously, from a send buffer), so every rank walks the stages in the same order without
  // waiting in a cycle; a send buffer's next turn waits only for a send whose receiver comes
  // earlier in that order.
  const int64_t block = int64_t{o_.shape.B} * o_.shape.T;
  const schedule::Shape& sh = schedule_.shape;
  // ZeRO 3 gathers each unit's parameters over the replicas in every forward, so every replica
  // runs as many passes as the one with the most batches (the sampler deals them round-robin:
  // replica 0), the extra ones on a block of zeros whose loss is not counted. (With 2 batches
  // over 4 replicas, replicas 2 and 3 ran none, and the others' gathers met their loss sum.)
  const int dp = dp_size();
  const int passes = o_.shape.zero.stage == 3 && dp > 1 ? (total + dp - 1) / dp : batches;
  const std::vector<int32_t> zeros(passes > batches ? static_cast<size_t>(block) : 0, 0);
  double loss = 0;
  for (int k = 0; k < passes; ++k) {
    const int32_t* x = k < batches ? tokens + k * block : zeros.data();
    const int32_t* y = k < batches ? targets + k * block : zeros.data();
    for (int s = 0; s < S_; ++s) {
      if (!on_this_rank(s)) continue;
      Chunk& c = chunk(s);
      if (s > 0 && on_this_rank(s - 1)) {
        read_held(acts_out_, s - 1, k, c.model->stage_input(0));
      } else if (s > 0) {
        recv_rows(c.model->stage_input(0), sh.rank_of(s - 1), tag(s, k % m_, false));
      }
      kernels::Act* output = s < S_ - 1 ? acts_out_.take(s, k) : nullptr;
      const float l = c.model->forward(x, y, o_.shape.B, o_.shape.T, 0, 0.0f, {.output = output});
      if (s == S_ - 1 && k < batches) loss += l;
      if (s < S_ - 1 && !on_this_rank(s + 1)) {
        acts_out_.sending(s, k, send_rows(output, sh.rank_of(s + 1), tag(s + 1, k % m_, false)));
      }
    }
  }
  acts_out_.finish_step();
  return static_cast<float>(replica_sum(loss) / total);  // the replicas' batches, each once
}

}  // namespace weft::runtime
