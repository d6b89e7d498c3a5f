#pragma once
// What the trainer trains with: this rank's part of the job, so that Trainer::run (trainer.h) is
// resume -> build -> loop -> report with no question of where the model runs. One class whatever
// the backend: the one model (model::Gpt), the one pipeline runtime (pipeline_runner.h) and the
// one data-parallel optimizer (ZeRO 0-3), on the host fp32 backend or on a kernels::Backend in
// bf16 mixed precision (the GPU, or its host emulation). Where it runs changes only how the job is
// described, how the GEMM ceiling is measured and which memory is reported.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/config/run_config.h"
#include "weft/core/status.h"
#include "weft/kernels/backend.h"
#include "weft/parallel/groups.h"
#include "weft/parallel/topology.h"
#include "weft/runtime/checkpointing.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/runtime/train_step.h"

namespace weft::runtime {

// What a device engine needs besides the run config.
struct EngineDevice {
  kernels::Backend* backend = nullptr;  // null: the CPU engine
  // A communicator on the device's memory over the ranks of a host group (comm/cuda: staged
  // through pinned memory, or NCCL); null: a split of the host group (host memory: host-bf16).
  std::function<std::unique_ptr<comm::Communicator>(comm::Communicator& host)> group;
  // The host buffer checkpoints stream the device's state through (RankState::staging): transfers
  // of a few MiB already run near a link's bandwidth (NVIDIA, "How to Optimize Data Transfers in
  // CUDA C/C++", 2012: pinned host-to-device copies level off from about 1 MB), and a save's or a
  // load's host memory is this, not the state's size.
  int64_t staging_bytes = int64_t{16} << 20;
};

// This rank's part of the job: its PipelineRunner (on the host fp32 backend, or on a device's in
// bf16 mixed precision), its training state for checkpoints and its report lines. Built by
// make_engine.
class Engine {
 public:
  // `program`: run_schedule(cfg); `me`: this rank's coordinates in cfg's layout.
  Engine(const config::RunConfig& cfg, const parallel::Coord& me, comm::Communicator* world,
         const parallel::ProcessGroups& groups, const schedule::Schedule& program,
         const EngineDevice& device);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Where the job runs, for the start line: "tp=2 pp=1 dp=1, 2 ranks x 1 thread; " (CPU) or
  // "host, bf16 mixed precision; " (a device).
  std::string describe() const;
  // The job's GEMM ceiling in FLOP/s (MFU's reference line, docs/training.md): fresh measures
  // again, otherwise a measurement of this shape earlier in the process may be reused.
  double gemm_ceiling(bool fresh);

  // This rank's memory for the end-of-run report: what is measured (the CPU: resident memory
  // above the start, GEMM-ceiling bursts left out; a device: its allocated bytes) against the
  // memory model's prediction for the rank.
  struct Memory {
    std::string title;  // "peak memory per rank, measured (...) / predicted"
    double used = 0, predicted = 0;
  };
  Memory memory() const;
  // Runs `measure`, work that is not training (a GEMM ceiling: its operands and packing buffers),
  // with the resident memory it bursts to left out of memory()'s peak.
  void outside_training(const std::function<void()>& measure);

  // This rank's training state for checkpoints (runtime/checkpointing.h), where the optimizer
  // holds it: a save streams it from there, a load into it.
  CheckpointJob checkpoint_job();

  // The pipeline runner itself: what initializes a fresh run, steps and evaluates
  // (PipelineRunner::init, step, evaluate), and what benchmarks read of it (its optimizers'
  // reduction times, the time it waited on other stages, its memory prediction term by term).
  PipelineRunner& runner() { return *runner_; }

 private:
  const config::RunConfig cfg_;
  parallel::Coord me_;
  comm::Communicator* world_;
  kernels::Backend* device_;  // null: the runner's own host fp32 backend
  int64_t rss_before_ = 0;
  int64_t peak_before_ceilings_ = 0;
  // Before the runner: its groups on the device's memory outlive the runner's sends in flight.
  std::vector<std::unique_ptr<comm::Communicator>> device_groups_;
  std::unique_ptr<PipelineRunner> runner_;
  std::unique_ptr<RankState> state_;  // the runner's optimizers' state
};

// This rank's engine for `cfg` (validated: run_config.h):
// `groups` are the job's process groups (empty for one process; they must outlive the engine),
// `world` the job's ranks (null: one process). The kernel thread count is set before.
Result<std::unique_ptr<Engine>> make_engine(const config::RunConfig& cfg,
                                            const parallel::ProcessGroups& groups,
                                            comm::Communicator* world, const EngineDevice& device);

// The program every rank of `cfg`'s pipeline runs (runner_schedule): what its runner is built from,
// and what sizes a device's arena before any group exists (`weft train --device`).
Result<schedule::Schedule> run_schedule(const config::RunConfig& cfg);

}  // namespace weft::runtime
