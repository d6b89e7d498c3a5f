#pragma once
// The device trainer: the one pipeline runtime (pipeline_stages.h) over model::Gpt chunks on a
// kernels::Backend (the GPU, or its host emulation; bf16 mixed precision), their AdamW moments in
// fp32 on the backend, and the end of a step: the gradients averaged over the data-parallel
// replicas (ZeRO 0, one all-reduce per chunk), the tied embedding's two copies summed, the global
// gradient norm by the one rule (train_step.h), and one AdamW launch over every tensor that also
// writes the bf16 weight copy the next forward reads. Same initialization, loss, clipping, AdamW
// and skip rule as the host trainer (pipeline_runner.h), in mixed precision. Trainer (trainer.h)
// runs it for `weft train --device` (engine.h), its checkpoints streamed from the backend's
// memory through a bounded host buffer (download_state/upload_state of a range), in the format of
// the host trainer's, so they load anywhere.
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
#include "weft/parallel/groups.h"
#include "weft/runtime/pipeline_stages.h"
#include "weft/runtime/train_step.h"
#include "weft/schedule/instr.h"

namespace weft::runtime {

// How the job is split, from this rank's point of view.
struct DeviceParallel {
  int tp = 1;                      // tensor-parallel size
  bool sequence_parallel = false;  // with tp > 1 (Korthikanti et al. 2022)
  int pp = 1, pp_rank = 0;
  int vp = 1;  // model chunks per pipeline rank (interleaved; needs pp > 1)
  schedule::Kind schedule = schedule::Kind::OneFOneB;  // gpipe, 1f1b, interleaved or zb-h1
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

class DeviceTrainer : public PipelineStages {
 public:
  // A step is `microbatches` [B,T] microbatches per replica.
  // recompute: model::Gpt's (Selective is None where the backend's attention keeps no T x T
  // probabilities: activation_layout.h).
  DeviceTrainer(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                int microbatches = 1, optim::AdamWConfig adamw = {}, DeviceParallel parallel = {},
                model::Recompute recompute = model::Recompute::None);
  ~DeviceTrainer() override;

  // What a DeviceTrainer of this shape allocates on its backend on pipeline rank `pp_rank`,
  // exactly (Backend::allocated_bytes() after construction; a step allocates nothing): the one
  // memory model, model::estimate_rank_memory under Precision::BF16Mixed, told this rank's chunks
  // (stages, activation slots: the peak its program keeps in flight), which counts each chunk's
  // model::Gpt buffers from the layouts its constructor allocates (model/activation_layout.h), the
  // moments (fp32, one element per parameter each) and the input gradients it sends back.
  static model::MemoryEstimate bytes(const model::GptConfig& cfg, int B, int T,
                                     int microbatches = 1, const DeviceParallel& parallel = {},
                                     model::Recompute recompute = model::Recompute::None);
  // What a backend arena needs for that and for device_gemm_ceiling's largest GEMM (its buffers
  // are taken and given back while the model exists), plus 64 MiB for alignment and small plans.
  static int64_t arena_bytes(const model::GptConfig& cfg, int B, int T, int microbatches = 1,
                             const DeviceParallel& parallel = {},
                             model::Recompute recompute = model::Recompute::None);

  // This rank's model chunks (global stages pp_rank + j*pp); model() is the first.
  int num_chunks() const { return PipelineStages::num_chunks(); }
  model::Gpt& model(int j = 0) { return *chunks()[j]; }
  const model::Gpt& model(int j = 0) const { return *chunks()[j]; }
  int step_count() const { return t_; }
  // GPT-2 initialization of every chunk (model::Gpt::init).
  void init(uint64_t seed);

  // tokens/targets: this replica's `microbatches` consecutive [B,T] blocks (host memory; every
  // pipeline rank passes the same). Returns the mean loss over the replicas and the gradient norm
  // before clipping, on every rank; a non-finite loss or norm skips the update.
  StepStats step(const int32_t* tokens, const int32_t* targets, float lr, double clip_norm);

  // Checkpoints read the state where it is (runtime/checkpointing.h), a bounded window at a time:
  // elements [at, at + n) of chunk j's group 0 (the fp32 master weights), 1 (AdamW's m) or 2 (its
  // v), in param_layout()'s order, to or from host memory. Uploading weights also refreshes their
  // bf16 copy, the one the forward reads.
  void download_state(int j, int group, int64_t at, int64_t n, float* out) const;
  void upload_state(int j, int group, int64_t at, int64_t n, const float* in);
  void set_step_count(int step_count) { t_ = step_count; }
  // The whole chunk (buffer.total() elements each); upload also sets the step count (the same for
  // every chunk).
  void download_state(int j, float* params, float* m, float* v) const;
  void upload_state(int j, const float* params, const float* m, const float* v, int step_count);

 private:
  // The end of a step (PipelineStages::finish): the replicas' all-reduce (ZeRO 0), the tied
  // embedding's two copies summed, the norm, one AdamW launch.
  StepStats finish(float loss) override;

  kernels::Backend& backend_;
  optim::AdamWConfig adamw_;
  DeviceParallel par_;
  // Per chunk: AdamW's moments, fp32, laid out like the parameters.
  std::vector<float*> m_, v_;
  std::unique_ptr<kernels::Backend::AdamW> plan_;  // every chunk's tensors, one launch
  int t_ = 0;
  // the step in progress
  float lr_ = 0;
  double clip_ = 0;
};

// The backend's GEMM ceiling for this model (FLOP/s): the forward linear layers of a step at micro
// batch B and length T (training_gemm_shapes' ".fwd" shapes, each weighted by its count), timed
// through Backend::linear_forward. The input- and weight-gradient GEMMs have the same sizes
// transposed; the forward ones stand for them.
double device_gemm_ceiling(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                           int reps = 5);

}  // namespace weft::runtime
