#pragma once
// The StageRunner that trains: this pipeline rank's model chunks (global stages pp_rank + j*pp,
// j < vp), each a model::Gpt holding exactly as many microbatches' activations as the rank's
// program keeps in flight for it, and the moves between ranks: activations and gradients go by
// send/recv over the pp group (sends eager and asynchronous, receives blocking, as the schedule
// simulation assumes). With tp > 1 and no sequence parallelism a boundary tensor is the same on
// every tp rank, so each sends 1/tp of its rows and the receiver all-gathers them (the PTD-P
// paper's scatter/gather optimization); with sequence parallelism the tensors are already split.
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
#include <memory>
#include <span>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/model/gpt.h"
#include "weft/model/memory.h"
#include "weft/runtime/executor.h"
#include "weft/runtime/microbatch_slots.h"
#include "weft/runtime/train_step.h"
#include "weft/schedule/instr.h"

namespace weft::runtime {

struct PipelineOptions {
  int B = 1, T = 1;
  model::Recompute recompute = model::Recompute::None;
  parallel::TensorParallel tp;
  comm::Communicator* pp = nullptr;  // the pipeline group (ranks in pp order); null when pp = 1
  comm::Communicator* dp = nullptr;  // the data-parallel replicas; null when dp = 1
  int pp_rank = 0;
  int zero = 0;        // ZeRO stage over dp
  ModelGroups groups;  // for finish_step
  optim::AdamWConfig adamw;
};

class PipelineRunner : public StageRunner {
 public:
  // `schedule`: lowered (add_communication, add_optimizer_step) and validated.
  PipelineRunner(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                 PipelineOptions options);
  ~PipelineRunner() override;

  void init(uint64_t seed);
  // One optimizer step over m microbatches: tokens/targets are [m, B, T] (every rank passes the
  // same). Returns the mean loss on every rank. `before_update`: see finish_step (tests).
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
  // print next to the measured peak.
  model::MemoryEstimate predicted_memory() const;

  std::span<model::Gpt* const> chunks() const { return chunk_models_; }
  std::span<optim::DistributedOptimizer* const> optimizers() const { return chunk_opts_; }
  const schedule::Schedule& schedule() const { return schedule_; }

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

 private:
  struct Chunk;
  Chunk& chunk(int stage);
  int acquire(Chunk& c, int microbatch);
  void run_backward(int stage, int microbatch, bool split);
  comm::Work send_rows(const float* full, int peer, int tag);
  void recv_rows(float* full, int peer, int tag);
  int tag(int stage, int microbatch, bool grad) const;
  int64_t boundary_elements() const;      // a stage's input or output on this rank: [Ns, C]
  int dp_size() const;                    // 1 without a dp group
  double replica_sum(double loss) const;  // over the pipeline stages and the replicas

  model::GptConfig cfg_;
  schedule::Schedule schedule_;
  PipelineOptions o_;
  int S_ = 1, m_ = 1;
  UnitPool unit_pool_;  // ZeRO 2/3: the units in use of all chunks (before them: outlives them)
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::vector<model::Gpt*> chunk_models_;
  std::vector<optim::DistributedOptimizer*> chunk_opts_;
  // the step in progress
  const int32_t* tokens_ = nullptr;
  const int32_t* targets_ = nullptr;
  float lr_ = 0;
  double clip_ = 0, loss_sum_ = 0;
  const BeforeUpdate* before_update_ = nullptr;
  StepStats stats_;
  Timing timing_;
  std::vector<float> scatter_buf_;
};

}  // namespace weft::runtime
