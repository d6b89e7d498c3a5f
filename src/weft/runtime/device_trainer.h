#pragma once
// The device trainer: the one pipeline runner (pipeline_runner.h: model::Gpt chunks, each with its
// replica's optim::DistributedOptimizer, ZeRO 0-3, and the one end of a step, finish_step) on a
// kernels::Backend in bf16 mixed precision (the GPU, or its host emulation), wired from a
// DeviceParallel. What it adds is the wiring and the memory arithmetic that sizes a device's arena
// (bytes, arena_bytes). Trainer (trainer.h) runs it for `weft train --device` (engine.h);
// checkpoints stream the optimizers' state from the backend's memory through a bounded host
// buffer, in the format of the host trainer's, so they load anywhere.
//
// Communication: scalars (losses, norms) go over host-memory communicators; stage boundaries and
// gradients over communicators on the backend's memory (comm/cuda: staged through pinned host
// memory when ranks share a GPU, NCCL across GPUs; the host communicators themselves for the host
// backend). The backend is synchronized before each such call and its result waited for before
// use, so any communicator's stream is correctly ordered against the kernels.

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

// How the job is split, from this rank's point of view.
struct DeviceParallel {
  int tp = 1;                      // tensor-parallel size
  bool sequence_parallel = false;  // with tp > 1 (Korthikanti et al. 2022)
  int pp = 1, pp_rank = 0;
  int vp = 1;  // model chunks per pipeline rank (interleaved)
  schedule::Kind schedule = schedule::Kind::OneFOneB;  // gpipe, 1f1b, interleaved or zb-h1
  int dp = 1;                                          // data-parallel replicas
  int zero = 0;  // ZeRO stage over the replicas (optim/distributed_optimizer.h)
  // Host-memory groups (null when the axis has size 1): the pipeline and the replicas.
  comm::Communicator* pp_group = nullptr;
  comm::Communicator* dp_group = nullptr;
  // Every rank of this replica (tp x pp), host memory: the gradient norm's sum. Null: pp_group.
  comm::Communicator* model_group = nullptr;
  // The tp group on the backend's memory (activations' partial sums, cross-entropy statistics).
  comm::Communicator* tp_data = nullptr;
  // The same groups on the backend's memory, and the first + last stage's ranks (the tied wte; null
  // on the ranks between).
  comm::Communicator* pp_data = nullptr;
  comm::Communicator* dp_data = nullptr;
  comm::Communicator* embedding_data = nullptr;
};

// This rank's DeviceParallel in a job of tp x pp x dp ranks, from the groups parallel::make_groups
// made (all null in one process): pipeline rank `pp_rank`, vp chunks per rank under `schedule`.
// `data(host)` gives the group on the backend's memory with host's ranks (the caller owns it; the
// host backend may return `host` itself); it is asked only for groups of more than one rank, in
// the same order on every rank (a split is collective). The one way the trainer and the tests
// wire a device job.
DeviceParallel device_parallel(const parallel::ProcessGroups& groups, int tp, int pp, int dp,
                               int pp_rank, int vp, schedule::Kind schedule,
                               const std::function<comm::Communicator*(comm::Communicator&)>& data);

// The pipeline runner (pipeline_runner.h) of a DeviceParallel on a backend: its schedule and
// options derived and checked here, and the memory arithmetic that sizes a device's arena.
class DeviceTrainer : public PipelineRunner {
 public:
  // A step is `microbatches` [B,T] microbatches per replica.
  // recompute: model::Gpt's (Selective is None where the backend's attention keeps no T x T
  // probabilities: activation_layout.h).
  DeviceTrainer(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                int microbatches = 1, optim::AdamWConfig adamw = {}, DeviceParallel parallel = {},
                model::Recompute recompute = model::Recompute::None);
  ~DeviceTrainer() override;

  // What a DeviceTrainer of this shape allocates on its backend on pipeline rank `pp_rank`,
  // exactly (Backend::allocated_bytes() after construction; from ZeRO 2 on, after a step, which
  // fills the unit pool): rank_memory (pipeline_runner.h) under Precision::BF16Mixed, the runner's
  // own predicted_memory() before it exists. Only the numbers of `parallel` are read (no group).
  static model::MemoryEstimate bytes(const model::GptConfig& cfg, int B, int T,
                                     int microbatches = 1, const DeviceParallel& parallel = {},
                                     model::Recompute recompute = model::Recompute::None);
  // What a backend arena needs for that and for device_gemm_ceiling's largest GEMM (its buffers
  // are taken and given back while the model exists), plus 64 MiB for alignment and small plans.
  static int64_t arena_bytes(const model::GptConfig& cfg, int B, int T, int microbatches = 1,
                             const DeviceParallel& parallel = {},
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
