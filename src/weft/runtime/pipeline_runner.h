#pragma once
// The pipeline runner: the one pipeline runtime (pipeline_stages.h) over model::Gpt chunks on any
// backend (host fp32 by default, or the backend its options name: a GPU in bf16 mixed precision or
// its host emulation), each with its replica's
// data-parallel optimizer. Activations and gradients move between ranks as
// PipelineStages moves them (sends eager, receives blocking, scatter/gather with tp > 1 without
// sequence parallelism).
//
// Data parallelism and ZeRO 0-3: each chunk's optim::DistributedOptimizer reduces its gradients
// over the dp group unit by unit as its backward passes complete them (the last microbatch's pass
// for ZeRO 0 and 1, every pass for 2 and 3), asynchronously, overlapping the rest of the program;
// ZeRO-3 gathers each unit's parameters before use. ReduceGrads(s) comes after stage s's last
// backward: by then all of the chunk's reductions have started. Each replica reads its own part of
// every global batch (data::Sampler with dp_rank).
//
// ZB-H1 (Qi et al. 2024): BackwardInput computes the input gradients only (what the previous stage
// waits for) and BackwardWeight the weight gradients later, from the output gradients the I pass
// kept; the slot is freed after W.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/core/status.h"
#include "weft/model/gpt.h"
#include "weft/model/memory.h"
#include "weft/parallel/groups.h"
#include "weft/runtime/pipeline_stages.h"
#include "weft/runtime/train_step.h"
#include "weft/schedule/instr.h"

namespace weft::runtime {

struct PipelineOptions {
  // Where the chunks live and compute (it must outlive the runner); null: a host FP32 backend of
  // the runner's own.
  kernels::Backend* backend = nullptr;
  int B = 1, T = 1;
  model::Recompute recompute = model::Recompute::None;
  parallel::TensorParallel tp;
  comm::Communicator* pp = nullptr;  // the pipeline group (ranks in pp order); null when pp = 1
  comm::Communicator* dp = nullptr;  // the data-parallel replicas; null when dp = 1
  // The same two groups on the backend's memory, where it is not host memory (null: pp and dp
  // carry the data too). `tp` and groups.embedding are on the backend's memory.
  comm::Communicator* pp_data = nullptr;
  comm::Communicator* dp_data = nullptr;
  int pp_rank = 0;
  int zero = 0;        // ZeRO stage over dp
  ModelGroups groups;  // for finish_step
  optim::AdamWConfig adamw;
};

// The numbers a pipeline rank's memory depends on besides the model and the schedule: all known
// before any group exists, so a device's arena is sized from them (device_arena_bytes).
struct RankShape {
  int B = 1, T = 1;
  model::Recompute recompute = model::Recompute::None;
  int pp_rank = 0;
  model::TpShape tp;
  model::ZeroSharding zero;  // the stage and the replicas it shards over
};
// What a rank of `schedule` allocates as PipelineRunner builds it (model::estimate_rank_memory over
// layout::rank_program): its predicted_memory(), and device_bytes before the runner
// exists.
// `threads`: the host kernels' (the GEMM packing buffers); `runtime_bytes`: the process's own
// (kernels::host_runtime_bytes() on the host; 0 for a device's arena).
model::MemoryEstimate rank_memory(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                                  const RankShape& shape, Precision precision, int threads,
                                  int64_t runtime_bytes);

// The program every rank of a pipeline runs: `kind` over pp ranks of vp chunks each, `microbatches`
// per step, checked against the model (model::validate_pipeline) and lowered with its
// communication and the optimizer step: what PipelineRunner takes.
Result<schedule::Schedule> runner_schedule(const model::GptConfig& cfg, schedule::Kind kind, int pp,
                                           int vp, int microbatches);

// How a job's groups reach a backend's memory: data(host) gives the group on the backend's memory
// with host's ranks (the caller owns it; the host backend may return `host` itself). It is asked
// only for groups of more than one rank, in the same order on every rank (a split is collective).
using DataGroups = std::function<comm::Communicator*(comm::Communicator&)>;

// The options of this rank's runner in a job whose groups parallel::make_groups made (all null in
// one process): the one wiring of `weft train` (either engine), `weft bench step`, `weft tune`'s
// trials and the tests. `backend` null: the runner's own host fp32 backend, whose memory the host
// groups reach; else `data` gives the groups on its memory (the tensor group, the pipeline's
// boundaries, the replicas' reductions, the tied embedding).
PipelineOptions pipeline_options(const parallel::ProcessGroups& groups, const RankShape& shape,
                                 optim::AdamWConfig adamw = {}, kernels::Backend* backend = nullptr,
                                 const DataGroups& data = {});

class PipelineRunner : public PipelineStages {
 public:
  // `schedule`: lowered (add_communication, add_optimizer_step) and validated.
  PipelineRunner(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                 PipelineOptions options);
  // One process with the whole model on `backend`; a step is `microbatches` [B,T] microbatches.
  // recompute: model::Gpt's (Selective is None where the backend's attention keeps no T x T
  // probabilities: activation_layout.h).
  PipelineRunner(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                 int microbatches = 1, optim::AdamWConfig adamw = {},
                 model::Recompute recompute = model::Recompute::None);
  ~PipelineRunner() override;

  // This rank's model chunks (global stages pp_rank + j*pp); model() is the first.
  model::Gpt& model(int j = 0) { return *chunks()[j]; }
  const model::Gpt& model(int j = 0) const { return *chunks()[j]; }
  int step_count() const { return opts_.front()->step_count(); }
  // ZeRO 0: chunk j's whole state (buffer.total() elements each) to or from host memory; upload
  // also sets the step count and rounds the weights' bf16 copy.
  void download_state(int j, float* params, float* m, float* v) const;
  void upload_state(int j, const float* params, const float* m, const float* v, int step_count);

  // GPT-2 initialization of every chunk (ZeRO 1-3: each rank its shards).
  void init(uint64_t seed);
  // One optimizer step over m microbatches: tokens/targets are [m, B, T] (every rank passes the
  // same). Returns the mean loss on every rank. `before_update`: see finish_step (tests).
  StepStats step(const int32_t* tokens, const int32_t* targets, float lr, double clip_norm,
                 const BeforeUpdate& before_update = {});

  // What this rank allocates for its chunks, by model::estimate_rank_memory from the chunks as
  // built (stages, activation slots, ZeRO): the prediction `weft train` and `weft bench step`
  // print next to the measured peak.
  model::MemoryEstimate predicted_memory() const;

  std::span<optim::DistributedOptimizer* const> optimizers() const { return opts_; }
  // ZeRO 2/3: the units in use of all chunks (empty below ZeRO 2).
  const optim::UnitPool& unit_pool() const { return *unit_pool_; }

 private:
  void before_weight_pass(int j, bool final) override;
  StepStats finish(float loss) override;

  PipelineOptions o_;
  // ZeRO 2/3: the units in use of all chunks (before them: outlives them)
  std::unique_ptr<optim::UnitPool> unit_pool_;
  std::vector<std::unique_ptr<optim::DistributedOptimizer>> owned_opts_;
  std::vector<optim::DistributedOptimizer*> opts_;
  // the step in progress
  float lr_ = 0;
  double clip_ = 0;
  const BeforeUpdate* before_update_ = nullptr;
};

// What a runner of this schedule and shape allocates on a bf16 backend, exactly
// (Backend::allocated_bytes() after construction; from ZeRO 2 on, after a step, which fills the
// unit pool): rank_memory under Precision::BF16Mixed, the runner's own predicted_memory() before
// it exists. The second: one process with the whole model.
model::MemoryEstimate device_bytes(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                                   const RankShape& shape);
model::MemoryEstimate device_bytes(const model::GptConfig& cfg, int B, int T, int microbatches = 1,
                                   model::Recompute recompute = model::Recompute::None);
// What a backend arena needs for device_bytes and for device_gemm_ceiling's largest GEMM (its
// buffers are taken and given back while the model exists), plus 64 MiB for alignment and small
// plans.
int64_t device_arena_bytes(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                           const RankShape& shape);
int64_t device_arena_bytes(const model::GptConfig& cfg, int B, int T, int microbatches = 1,
                           model::Recompute recompute = model::Recompute::None);

// The backend's GEMM ceiling for this model (FLOP/s): the forward linear layers of a step at micro
// batch B and length T (training_gemm_shapes' ".fwd" shapes, each weighted by its count), timed
// through Backend::linear_forward. The input- and weight-gradient GEMMs have the same sizes
// transposed; the forward ones stand for them.
double device_gemm_ceiling(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                           int reps = 5);

}  // namespace weft::runtime
