#pragma once
// The one pipeline runtime over model::Gpt chunks on any backend (issue 19): the StageRunner half
// of PipelineRunner (pipeline_runner.h: each chunk's optim::DistributedOptimizer, ZeRO 0-3, on
// any backend, and the arena arithmetic of a device). It holds
// this pipeline rank's chunks (global stages shape.stage_of(pp_rank, j), each keeping exactly as
// many microbatches' activations as the rank's program keeps in flight for it), runs their forward
// and backward passes (B, or a zero-bubble schedule's I and W), and moves activations and gradients
// between ranks: sends eager and asynchronous, receives blocking (as the schedule simulation
// assumes). What a rank holds is what its program keeps in flight, never a buffer per microbatch
// (DESIGN.md §1.8):
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
// optimization); with sequence parallelism the tensors are already split. What a step does at its
// end (the reductions, the norm, the update) is the trainer's: reduce_grads checks that every
// backward pass ran, optimizer_step hands the step's mean loss to finish().
//
// Memory: the boundaries live in the backend's memory (the chunks' models and the send buffers,
// taken from their backend); the communicators given here must reach it (the host ones for the
// host backends, comm/cuda for a GPU), and the backend is synchronized before each send, receive
// and collective (a communicator may run on another stream, or on the host).

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/model/gpt.h"
#include "weft/model/memory.h"
#include "weft/runtime/executor.h"
#include "weft/runtime/microbatch_slots.h"
#include "weft/runtime/send_pool.h"
#include "weft/runtime/train_step.h"
#include "weft/schedule/instr.h"

namespace weft::runtime {

struct PipelineWiring {
  // Where the chunks live and compute (it must outlive the runtime); null: a host FP32 backend of
  // the runtime's own.
  kernels::Backend* backend = nullptr;
  int B = 1, T = 1;
  int pp_rank = 0;
  // The tensor-parallel group on the boundaries' memory, and whether sequence parallelism splits
  // them (the chunks' own TensorParallel).
  parallel::TensorParallel tp;
  comm::Communicator* boundary = nullptr;  // the pp group on the boundaries' memory (pp > 1)
  comm::Communicator* pp = nullptr;        // the pp group, host memory: the loss (null: pp = 1)
  comm::Communicator* dp = nullptr;        // the replicas, host memory (null: dp = 1)
};

class PipelineStages : public StageRunner {
 public:
  // `schedule`: lowered (add_communication, add_optimizer_step) and validated.
  PipelineStages(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                 PipelineWiring wiring);
  ~PipelineStages() override;

  // Wall time of the last step() and the part of it this rank spent blocked in receives, waiting
  // for another stage: the pipeline bubble as this rank saw it (Narayanan et al.'s bubble
  // fraction is waiting / (seconds - waiting), summed over ranks).
  struct Timing {
    double seconds = 0, waiting = 0;
  };
  const Timing& last_timing() const { return timing_; }
  const schedule::Schedule& schedule() const { return schedule_; }
  std::span<model::Gpt* const> chunks() const { return models_; }
  int num_chunks() const { return schedule_.shape.vp; }
  kernels::Backend& backend() const { return backend_; }

  // The mean loss of forward passes (no gradients) over `total` [B,T] blocks that the replicas
  // share: this replica runs `batches` of them (tokens/targets are [batches, B, T], batches may be
  // 0). On every rank.
  float evaluate(const int32_t* tokens, const int32_t* targets, int batches, int total);

  // StageRunner
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

 protected:
  // Chunk j of this rank: its global stage and the activation slots its model must hold.
  int stage_of_chunk(int j) const { return schedule_.shape.stage_of(wiring_.pp_rank, j); }
  int slots_of_chunk(int j) const { return rank_.slots.at(rank_.chunks.at(j).pool); }
  // The chunk before j whose model holds the slots of j's pool (its model shares them:
  // model::Gpt's `share_slots`), or null when j is the pool's first.
  const model::Gpt* slot_owner(int j) const;
  // What this rank holds, as the memory model prices it (layout::rank_program).
  const model::RankProgram& rank_program() const { return rank_; }
  // Hands chunk j's model over (in order j = 0, 1, ...), built for stage_of_chunk(j) with
  // slots_of_chunk(j) slots, shared with slot_owner(j).
  void add_chunk(std::unique_ptr<model::Gpt> model);
  // One optimizer step over m microbatches (tokens/targets: [m, B, T], every rank the same): zero
  // the gradients, run the program; optimizer_step calls finish().
  StepStats run_step(const int32_t* tokens, const int32_t* targets);
  // Before chunk j's B or W pass; `final`: the step's last one for the chunk.
  virtual void before_weight_pass(int j, bool final) {}
  // The end of a step: every pass has run and every send completed; `loss` is the replicas' mean
  // loss over the step's microbatches, on every rank.
  virtual StepStats finish(float loss) = 0;
  int dp_size() const { return wiring_.dp != nullptr ? wiring_.dp->size() : 1; }
  // d(loss)/d(logits) scale of each forward: the mean over every replica's microbatches (the
  // optimizers sum the replicas' gradients).
  float loss_scale() const { return 1.0f / static_cast<float>(m_ * dp_size()); }
  int microbatches() const { return m_; }
  const model::GptConfig& config() const { return cfg_; }
  const PipelineWiring& wiring() const { return wiring_; }

 private:
  struct Chunk {
    int index = 0;  // j
    int stage = 0;
    std::unique_ptr<model::Gpt> model;
    int weight_passes = 0;             // backward (or W) passes of this step so far
    MicrobatchSlots* slots = nullptr;  // its pool's
    int acquire(int mb) { return slots->acquire(index, mb); }
    int slot_of(int mb) const { return slots->of(index, mb); }
    void release(int mb) { slots->release(index, mb); }
  };
  Chunk& chunk(int stage);
  bool on_this_rank(int stage) const { return schedule_.shape.rank_of(stage) == wiring_.pp_rank; }
  void run_backward(int stage, int microbatch, bool split);
  comm::Work send_rows(const kernels::Act* full, int peer, int tag);
  void recv_rows(kernels::Act* full, int peer, int tag);
  // Copies a stage boundary from one chunk's memory to another's (the same rank).
  void copy_boundary(kernels::Act* dst, const kernels::Act* src);
  int tag(int stage, int microbatch, bool grad) const;
  int64_t boundary_elements() const;  // a stage's input or output on this rank: [Ns, C]
  int64_t boundary_bytes() const;
  // How `elements` activations go to a communicator (comm::payload_of).
  comm::Payload payload(int64_t elements) const { return comm::payload_of(elements, act_bytes_); }
  double replica_sum(double loss) const;  // over the pipeline stages and the replicas

  // First: the chunks' memory outlives everything below.
  std::unique_ptr<kernels::Backend> own_backend_;
  kernels::Backend& backend_;
  model::GptConfig cfg_;
  schedule::Schedule schedule_;
  PipelineWiring wiring_;
  int S_ = 1, m_ = 1;
  int64_t act_bytes_ = 4;               // the chunks' activation element
  model::RankProgram rank_;             // its chunks' slot pools and send buffers
  std::vector<MicrobatchSlots> pools_;  // its slot pools' bookkeeping
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::vector<model::Gpt*> models_;
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
  StepStats stats_;
  Timing timing_;
};

}  // namespace weft::runtime
