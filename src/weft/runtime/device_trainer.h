#pragma once
// The device trainer: the one pipeline runner (pipeline_runner.h: model::Gpt chunks, each with its
// replica's optim::DistributedOptimizer, ZeRO 0-3, and the one end of a step, finish_step) on a
// kernels::Backend in bf16 mixed precision (the GPU, or its host emulation), wired by
// pipeline_options as every runner is. What it adds is the memory arithmetic that sizes a device's
// arena (bytes, arena_bytes), a one-process constructor and ZeRO 0's whole-state transfers (the
// tests and `weft bench step --device` use them). `weft train --device` builds the runner itself
// (engine.h), with the device's backend; checkpoints stream the optimizers' state from the
// backend's memory through a bounded host buffer, in the host runs' format, so they load anywhere.
//
// Communication: scalars (losses, norms) go over host-memory communicators; stage boundaries and
// gradients over communicators on the backend's memory (comm/cuda: staged through pinned host
// memory when ranks share a GPU, NCCL across GPUs; the host communicators themselves for the host
// backend). A communicator on the backend's memory starts each op after the backend work queued
// before it, and the runtime orders the kernels that read its result behind it (comm::Work::order;
// docs/cuda.md, "Streams and events").

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/kernels/backend.h"
#include "weft/model/gpt.h"
#include "weft/model/memory.h"
#include "weft/optim/adamw.h"
#include "weft/optim/distributed_optimizer.h"
#include "weft/parallel/groups.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/runtime/train_step.h"
#include "weft/schedule/instr.h"

namespace weft::runtime {

// The pipeline runner (pipeline_runner.h) on a backend in bf16 mixed precision, and the memory
// arithmetic that sizes a device's arena.
class DeviceTrainer : public PipelineRunner {
 public:
  // A rank of a job: `schedule` from runner_schedule, `options` from pipeline_options with the
  // backend (options.backend, which must be set) and its data groups.
  DeviceTrainer(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                PipelineOptions options);
  // One process with the whole model; a step is `microbatches` [B,T] microbatches.
  // recompute: model::Gpt's (Selective is None where the backend's attention keeps no T x T
  // probabilities: activation_layout.h).
  DeviceTrainer(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                int microbatches = 1, optim::AdamWConfig adamw = {},
                model::Recompute recompute = model::Recompute::None);
  ~DeviceTrainer() override;

  // What a DeviceTrainer of this schedule and shape allocates on its backend, exactly
  // (Backend::allocated_bytes() after construction; from ZeRO 2 on, after a step, which fills the
  // unit pool): rank_memory (pipeline_runner.h) under Precision::BF16Mixed, the runner's own
  // predicted_memory() before it exists. The second: one process with the whole model.
  static model::MemoryEstimate bytes(const model::GptConfig& cfg,
                                     const schedule::Schedule& schedule, const RankShape& shape);
  static model::MemoryEstimate bytes(const model::GptConfig& cfg, int B, int T,
                                     int microbatches = 1,
                                     model::Recompute recompute = model::Recompute::None);
  // What a backend arena needs for bytes() and for device_gemm_ceiling's largest GEMM (its
  // buffers are taken and given back while the model exists), plus 64 MiB for alignment and small
  // plans.
  static int64_t arena_bytes(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                             const RankShape& shape);
  static int64_t arena_bytes(const model::GptConfig& cfg, int B, int T, int microbatches = 1,
                             model::Recompute recompute = model::Recompute::None);

  // This rank's model chunks (global stages pp_rank + j*pp); model() is the first.
  int num_chunks() const { return static_cast<int>(chunks().size()); }
  model::Gpt& model(int j = 0) { return *chunks()[j]; }
  const model::Gpt& model(int j = 0) const { return *chunks()[j]; }
  int step_count() const { return optimizers().front()->step_count(); }

  // ZeRO 0: chunk j's whole state (buffer.total() elements each) to or from host memory; upload
  // also sets the step count and rounds the weights' bf16 copy.
  void download_state(int j, float* params, float* m, float* v) const;
  void upload_state(int j, const float* params, const float* m, const float* v, int step_count);
};

// The backend's GEMM ceiling for this model (FLOP/s): the forward linear layers of a step at micro
// batch B and length T (training_gemm_shapes' ".fwd" shapes, each weighted by its count), timed
// through Backend::linear_forward. The input- and weight-gradient GEMMs have the same sizes
// transposed; the forward ones stand for them.
double device_gemm_ceiling(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                           int reps = 5);

}  // namespace weft::runtime
