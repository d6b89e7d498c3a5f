#pragma once
// The step loop that `weft train`, `weft bench step` and `weft tune`'s trials share (issue 42):
// this rank's Engine (made by make_engine, on any backend), where its batches come from, and per
// step the next batch, PipelineRunner::step timed on the host (a step ends with its loss and
// gradient norm on the host, so a device is idle when the clock stops) and the step's record. What
// each command adds stays with it: train validates, saves and writes the records (trainer.cc);
// bench measures the GEMM ceiling between the steps (cli/bench_command.cc); tune agrees on failures
// and stop requests between the ranks (cli/tune_command.cc).

#include <cstdint>
#include <functional>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/config/run_config.h"
#include "weft/data/sampler.h"
#include "weft/runtime/engine.h"
#include "weft/runtime/metrics.h"

namespace weft::runtime {

class StepLoop {
 public:
  // Fills one step's tokens and targets, [m, B, T] each: the replica's microbatches (every rank
  // of a replica the same).
  using NextBatch = std::function<void(int32_t* tokens, int32_t* targets)>;

  // `cfg`: the run the engine was made for (its batch shape and the job's tokens per step).
  // `together`: the ranks start each step at a barrier, so that every rank's time is the step's
  // (benchmarks; null: no barrier, as in training). `steps_done`: where the count starts (a
  // resume).
  StepLoop(Engine& engine, const config::RunConfig& cfg, NextBatch next,
           comm::Communicator* together = nullptr, int64_t steps_done = 0);

  // One optimizer step at `lr`, clipping the gradient norm at `clip` (0: off). The record's step,
  // lr, loss, grad_norm, skipped, step_seconds, tokens_per_s and tokens; the rest is the caller's.
  StepRecord step(double lr, double clip);

 private:
  Engine& engine_;
  NextBatch next_;
  comm::Communicator* together_;
  int64_t steps_done_;
  int64_t tokens_per_step_;  // the job's: global batch x T
  std::vector<int32_t> tokens_, targets_;
};

// The training split in the sampler's order (data::Sampler::next_batch).
StepLoop::NextBatch batches_of(data::Sampler& sampler);

}  // namespace weft::runtime
