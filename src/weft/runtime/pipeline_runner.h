#pragma once
// The one pipeline runtime (issues 19, 42): this pipeline rank's model::Gpt chunks on any backend
// (host fp32 by default, or the backend its options name: a GPU in bf16 mixed precision or its
// host emulation), each with its replica's data-parallel optimizer, running the rank's program of
// the schedule (executor.h). Chunk j is global stage shape.stage_of(pp_rank, j) and keeps exactly
// as many microbatches' activations as the rank's program keeps in flight for it. It runs their
// forward and backward passes (B, or a zero-bubble schedule's I and W), and moves activations and
// gradients between ranks: sends eager and asynchronous, receives blocking (as the schedule
// simulation assumes). What a rank holds is what its program keeps in flight, never a buffer per
// microbatch (DESIGN.md §1.8):
//   - a stage's output and its input gradient are written into the rank's send buffers
//     (send_pool.h, as many as schedule::send_buffers says), each free again when its send
//     completes; the next stage on the same rank reads its input from there;
//   - a received activation lands in the slot it is kept in (the stage's input); a received output
//     gradient in the chunk's workspace (Gpt::output_grad), right before the backward reading it;
//   - the step's tokens and targets reach a chunk one microbatch at a time (the model's
//     workspace, Backend::upload_async), and each microbatch's mean loss is added to one double
//     in the backend's memory (Backend::add_mean), read once at the step's end: no host wait per
//     microbatch on a device.
// With tp > 1 and no sequence parallelism a boundary tensor is the same on every tp rank, so each
// sends 1/tp of its rows and the receiver all-gathers them (the PTD-P paper's scatter/gather
// optimization); with sequence parallelism the tensors are already split.
//
// Data parallelism and ZeRO 0-3: each chunk's optim::DistributedOptimizer reduces its gradients
// over the dp group unit by unit as its backward passes complete them (the last microbatch's pass
// for ZeRO 0 and 1, every pass for 2 and 3), asynchronously, overlapping the rest of the program;
// ZeRO-3 gathers each unit's parameters before use. ReduceGrads(s) checks that stage s's last
// backward has run: by then all of the chunk's reductions have started; the OptimizerStep ends the
// step in finish_step (train_step.h). Each replica reads its own part of every global batch
// (data::Sampler with dp_rank).
//
// ZB-H1 (Qi et al. 2024): BackwardInput computes the input gradients only (what the previous stage
// waits for) and BackwardWeight the weight gradients later, from the output gradients the I pass
// kept; the slot is freed after W.
//
// Memory: the boundaries live in the backend's memory (the chunks' models and the send buffers,
// taken from their backend); the communicators given here must reach it (the host ones for the
// host backends, comm/cuda for a GPU), which order their operations after the backend's work
// (comm/communicator.h): nothing synchronizes the backend before a send, receive or collective.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/core/status.h"
#include "weft/model/gpt.h"
#include "weft/model/memory.h"
#include "weft/parallel/groups.h"
#include "weft/runtime/executor.h"
#include "weft/runtime/microbatch_slots.h"
#include "weft/runtime/send_pool.h"
#include "weft/runtime/train_step.h"
#include "weft/schedule/instr.h"

namespace weft::runtime {

struct PipelineOptions {
  // Where the chunks live and compute (it must outlive the runner); null: a host FP32 backend of
  // the runner's own.
  kernels::Backend* backend = nullptr;
  // B, T, recompute, pp_rank, and the tp and dp sizes the groups below have (the runner checks).
  model::RankShape shape = {};
  comm::Communicator* tp = nullptr;  // the tensor-parallel group; null when tp = 1
  comm::Communicator* pp = nullptr;  // the pipeline group (ranks in pp order); null when pp = 1
  comm::Communicator* dp = nullptr;  // the data-parallel replicas; null when dp = 1
  // The same two groups on the backend's memory, where it is not host memory (null: pp and dp
  // carry the data too). `tp` and groups.embedding are on the backend's memory.
  comm::Communicator* pp_data = nullptr;
  comm::Communicator* dp_data = nullptr;
  ModelGroups groups = {};  // for finish_step
  optim::AdamWConfig adamw = {};
};

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
PipelineOptions pipeline_options(const parallel::ProcessGroups& groups,
                                 const model::RankShape& shape, optim::AdamWConfig adamw = {},
                                 kernels::Backend* backend = nullptr, const DataGroups& data = {});

class PipelineRunner : public StageRunner {
 public:
  // `schedule`: lowered (add_communication, add_optimizer_step) and validated.
  PipelineRunner(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                 PipelineOptions options);
  ~PipelineRunner() override;

  // This rank's model chunks (global stages shape.stage_of(pp_rank, j)); model() is the first.
  std::span<model::Gpt* const> chunks() const { return models_; }
  int num_chunks() const { return schedule_.shape.vp; }
  model::Gpt& model(int j = 0) { return *models_.at(j); }
  const model::Gpt& model(int j = 0) const { return *models_.at(j); }
  std::span<optim::DistributedOptimizer* const> optimizers() const { return opts_; }
  // ZeRO 2/3: the units in use of all chunks (empty below ZeRO 2).
  const optim::UnitPool& unit_pool() const { return *unit_pool_; }
  const schedule::Schedule& schedule() const { return schedule_; }
  int step_count() const { return opts_.front()->step_count(); }

  // GPT-2 initialization of every chunk (ZeRO 1-3: each rank its shards).
  void init(uint64_t seed);
  // One optimizer step over m microbatches: tokens/targets are [m, B, T] (every rank passes the
  // same): zero the gradients, run this rank's program, finish_step. Returns the mean loss on
  // every rank. `before_update`: see finish_step (tests).
  StepStats step(const int32_t* tokens, const int32_t* targets, float lr, double clip_norm,
                 const BeforeUpdate& before_update = {});
  // The mean loss of forward passes (no gradients) over `total` [B,T] blocks that the replicas
  // share: this replica runs `batches` of them (tokens/targets are [batches, B, T], batches may be
  // 0). On every rank.
  float evaluate(const int32_t* tokens, const int32_t* targets, int batches, int total);

  // Wall time of the last step() and the part of it this rank spent blocked in receives, waiting
  // for another stage: the pipeline bubble as this rank saw it (Narayanan et al.'s bubble
  // fraction is waiting / (seconds - waiting), summed over ranks).
  struct Timing {
    double seconds = 0, waiting = 0;
  };
  const Timing& last_timing() const { return timing_; }

  // What this rank allocates for its chunks, by model::estimate_rank_memory from the chunks as
  // built (stages, activation slots, ZeRO): the prediction `weft train` and `weft bench step`
  // print next to the measured peak. `snapshot`: the rank keeps an asynchronous checkpoint's copy
  // of its state (model::MemoryCounting::snapshot).
  model::MemoryEstimate predicted_memory(bool snapshot = false) const;

  // StageRunner: what each instruction of the program does (pipeline_passes.cc).
  void forward(int stage, int microbatch) override;
  void backward(int stage, int microbatch) override;
  void backward_input(int stage, int microbatch) override;
  void backward_weight(int stage, int microbatch) override;
  void send_activation(int stage, int microbatch, int peer) override;
  void recv_activation(int stage, int microbatch, int peer) override;
  void send_grad(int stage, int microbatch, int peer) override;
  void recv_grad(int stage, int microbatch, int peer) override;
  void reduce_grads(int stage) override;
  void optimizer_step() override;

 private:
  // Chunk j of this rank: global stage `stage`, its model and optimizer, and the activation slots
  // of its pool (shared with the rank's other chunks of that pool: layout/rank.h).
  struct Chunk {
    int index = 0;  // j
    int stage = 0;
    std::unique_ptr<model::Gpt> model;
    std::unique_ptr<optim::DistributedOptimizer> opt;
    int weight_passes = 0;             // backward (or W) passes of this step so far
    MicrobatchSlots* slots = nullptr;  // its pool's
    int acquire(int mb) { return slots->acquire(index, mb); }
    int slot_of(int mb) const { return slots->of(index, mb); }
    void release(int mb) { slots->release(index, mb); }
  };
  Chunk& chunk(int stage);
  bool on_this_rank(int stage) const { return schedule_.shape.rank_of(stage) == o_.shape.pp_rank; }
  // The model of the chunk before j that holds the slots of j's pool (j's model shares them:
  // model::Gpt's `share_slots`), or null when j is the pool's first.
  const model::Gpt* slot_owner(int j) const;
  void run_backward(int stage, int microbatch, bool split);
  comm::Work send_rows(const kernels::Act* full, int peer, int tag);
  void recv_rows(kernels::Act* full, int peer, int tag);
  // Copies the boundary `pool` holds for (stage, microbatch) into `dst` (a chunk's memory on this
  // rank: the next stage reads it there) and frees the buffer.
  void read_held(SendPool& pool, int stage, int microbatch, kernels::Act* dst);
  // The tag of the message carrying stage `stage`'s input activation (or, grad, the gradient of
  // its output) for a microbatch of the step: one tag per (stage, microbatch, direction).
  int tag(int stage, int mb, bool grad) const { return (stage * m_ + mb) * 2 + (grad ? 1 : 0); }
  int64_t boundary_elements() const;  // a stage's input or output on this rank: [Ns, C]
  int64_t boundary_bytes() const { return boundary_elements() * act_bytes_; }
  // How `elements` activations go to a communicator (comm::payload_of).
  comm::Payload payload(int64_t elements) const { return comm::payload_of(elements, act_bytes_); }
  int dp_size() const { return o_.shape.zero.dp; }
  // The tensor-parallel group as the model takes it (its size is o_.shape.tp.tp).
  parallel::TensorParallel tp() const { return {o_.tp, o_.shape.tp.sequence_parallel}; }
  // d(loss)/d(logits) scale of each forward: the mean over every replica's microbatches (the
  // optimizers sum the replicas' gradients).
  float loss_scale() const { return 1.0f / static_cast<float>(m_ * dp_size()); }
  double replica_sum(double loss) const;  // over the pipeline stages and the replicas

  // First: the chunks' memory outlives everything below.
  std::unique_ptr<kernels::Backend> own_backend_;
  kernels::Backend& backend_;
  model::GptConfig cfg_;
  schedule::Schedule schedule_;
  PipelineOptions o_;
  comm::Communicator* boundary_ = nullptr;  // the pp group on the boundaries' memory (pp > 1)
  int S_ = 1, m_ = 1;
  int64_t act_bytes_ = 4;               // the chunks' activation element
  model::RankProgram rank_;             // its chunks' slot pools and send buffers
  std::vector<MicrobatchSlots> pools_;  // its slot pools' bookkeeping
  // ZeRO 2/3: the units in use of all chunks (before them: outlives them)
  std::unique_ptr<optim::UnitPool> unit_pool_;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::vector<model::Gpt*> models_;
  std::vector<optim::DistributedOptimizer*> opts_;
  // The send buffers: the stage outputs and the input gradients this rank produces.
  SendPool acts_out_, grads_out_;
  // With scatter/gather: the 1/tp part of a boundary a receive lands in, in the chunks' backend.
  kernels::Act* part_ = nullptr;
  int64_t part_elements_ = 0;
  // The output gradient the last receive wrote into its chunk's workspace: (stage, microbatch).
  std::pair<int, int> received_grad_{-1, -1};
  // the step in progress
  const int32_t* tokens_ = nullptr;
  const int32_t* targets_ = nullptr;
  double* step_loss_ = nullptr;  // the last stage's rank: the step's sum of mean losses (backend)
  float lr_ = 0;
  double clip_ = 0;
  const BeforeUpdate* before_update_ = nullptr;
  StepStats stats_;
  Timing timing_;
};

// What a runner of this schedule and shape allocates on a bf16 backend, exactly
// (Backend::allocated_bytes() after construction; from ZeRO 2 on, after a step, which fills the
// unit pool): rank_memory under Precision::BF16Mixed, the runner's own predicted_memory() before
// it exists.
model::MemoryEstimate device_bytes(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                                   const model::RankShape& shape);
// What a backend arena needs for device_bytes and for device_gemm_ceiling's largest GEMM (its
// buffers are taken and given back while the model exists), plus 64 MiB for alignment and small
// plans.
int64_t device_arena_bytes(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                           const model::RankShape& shape);

// The backend's GEMM ceiling for this model (FLOP/s): the forward linear layers of a step at micro
// batch B and length T (training_gemm_shapes' ".fwd" shapes, each weighted by its count), timed
// through Backend::linear_forward. The input- and weight-gradient GEMMs have the same sizes
// transposed; the forward ones stand for them. Five timed repetitions each.
double device_gemm_ceiling(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T);

}  // namespace weft::runtime
