#include "weft/runtime/step_loop.h"

#include <chrono>
#include <thread>
#include <utility>

#include "weft/core/clock.h"
#include "weft/core/fault.h"

namespace weft::runtime {

StepLoop::StepLoop(Engine& engine, const config::RunConfig& cfg, NextBatch next,
                   comm::Communicator* together, int64_t steps_done)
    : engine_(engine),
      next_(std::move(next)),
      together_(together),
      steps_done_(steps_done),
      tokens_per_step_(int64_t{cfg.train.global_batch} * cfg.train.seq_len) {
  tokens_.resize(static_cast<size_t>(cfg.microbatches()) * cfg.parallel.micro_batch *
                 cfg.train.seq_len);
  targets_.resize(tokens_.size());
}

StepRecord StepLoop::step(double lr, double clip) {
  StepRecord r;
  r.lr = lr;
  comm::set_current_step(steps_done_ + 1);  // named by a wait that gives up
  next_(tokens_.data(), targets_.data());
  if (together_ != nullptr && together_->size() > 1) together_->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  const double waited = comm::waiting_seconds();
  // Tests of stragglers: WEFT_FAULT=slow:<ms>:<rank> makes that rank compute longer (core/fault.h).
  static const int64_t slow_ms = fault_value("slow");
  if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
  const StepStats stats =
      engine_.runner().step(tokens_.data(), targets_.data(), static_cast<float>(lr), clip);
  r.step_seconds = seconds_since(t0);
  r.comm_seconds = comm::waiting_seconds() - waited;
  r.step = ++steps_done_;
  r.loss = stats.loss;
  r.grad_norm = stats.grad_norm;
  r.skipped = stats.skipped;
  r.tokens_per_s = static_cast<double>(tokens_per_step_) / r.step_seconds;
  r.tokens = steps_done_ * tokens_per_step_;
  return r;
}

StepLoop::NextBatch batches_of(data::Sampler& sampler) {
  return [&sampler](int32_t* tokens, int32_t* targets) { sampler.next_batch(tokens, targets); };
}

}  // namespace weft::runtime
