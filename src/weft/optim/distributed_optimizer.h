#pragma once
// The optimizer of one model chunk, data-parallel with ZeRO stage 0-3 (Rajbhandari et al. 2020,
// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", §5; the stage-1 form is
// Megatron-LM's distributed optimizer). It is the chunk's model::ParamHooks: the model tells it
// when each unit (a layer, the embeddings, ln_f; model::ParamUnit) is used and when the unit's
// gradients of a backward pass are complete, and it starts that unit's gradient reduction at
// once, asynchronously, so reductions overlap the rest of backward (the buckets of PyTorch DDP,
// Li et al. 2020, are our units). At most model::kZeroBucketsInFlight are in flight: each holds
// MPI's temporaries (and from ZeRO 2 on the unit's full gradient) until it completes.
//
//   stage  gradients reduced                          kept per rank                   after step
//   0      all-reduce per unit, last microbatch       params, grads, m, v             -
//   1      reduce-scatter per unit, last microbatch   params, grads; shard of m, v,   all-gather
//                                                     master params, reduced grads    params
//   2      reduce-scatter per unit, EVERY microbatch, params; shard of grads, m, v,   all-gather
//          into the shard; the unit's full gradient   master params; full grads only  params
//          buffer then goes back to the pool          of the units in use
//   3      as 2                                       shards only; a unit's params    -
//                                                     are all-gathered into a pool
//                                                     buffer before each use and
//                                                     given back after
//
// Shards are per unit: rank r holds the r-th of dp equal aligned ranges of every unit
// (tensor/zero_shards.h). From ZeRO-2 on the model has no gradient buffer (from ZeRO-3 on no
// parameter buffer) of its own (model::ParamStorage): the units in use live in a pool of
// unit-sized buffers (tensor/unit_pool.h), each the unit's range padded to dp shards, where the
// collectives run in place; the model finds them through ParamHooks. Gradients are averaged over
// dp before the norm. With dp = 1 (or no dp group) every stage degenerates to the plain optimizer
// with extra copies.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/model/gpt.h"
#include "weft/optim/adamw.h"
#include "weft/tensor/aligned_buffer.h"
#include "weft/tensor/unit_pool.h"

namespace weft::optim {

class DistributedOptimizer final : public model::ParamHooks {
 public:
  // How a chunk's buffers must be laid out and held for `zero` over `dp` ranks: units aligned to
  // dp * 16 elements (so every unit's padded range fits before the next unit, and shards are
  // aligned); from ZeRO-2 on the gradients, from ZeRO-3 on also the parameters, held here.
  static model::ParamStorage storage(int zero, int dp);

  // `model` must have been built with storage(zero, dp size); `dp` may be null (one replica).
  // Installs itself as the model's ParamHooks. `pool` (which must outlive it) may be shared by the
  // optimizers of one rank's chunks, whose passes never overlap (ZeRO 2/3 complete every reduction
  // at the end of each pass); null: its own.
  DistributedOptimizer(model::Gpt& model, comm::Communicator* dp, int zero, AdamWConfig cfg = {},
                       UnitPool* pool = nullptr);
  ~DistributedOptimizer() override;
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  int zero() const { return zero_; }
  // Initializes the parameters: ZeRO 0 the whole chunk; ZeRO 1-3 only this rank's parts, into the
  // master shard (ZeRO 1/2 then all-gather the model's copy).
  void init(uint64_t seed);
  // Whether the next backward (or weight-gradient) pass is the chunk's last of the step: ZeRO 0
  // and 1 reduce only then, over the accumulated gradients.
  void set_final_pass(bool final_pass) { final_pass_ = final_pass; }

  // model::ParamHooks
  const float* gather(int unit) override;
  void release(int unit) override;
  float* grads(int unit) override;
  void grads_ready(int unit) override;
  void backward_done() override;

  // After the step's last pass: waits for every reduction and averages the gradients over dp.
  void finish_reduction();
  // The gradients the rest of the step works on: whole slices (ZeRO 0) or this rank's shard.
  std::span<const model::GradPart> grad_parts() const { return parts_; }
  // The group over which grad_parts() partition the gradients (null: they are whole).
  comm::Communicator* shard_group() const { return zero_ > 0 ? dp_ : nullptr; }
  // AdamW on grad_parts(); then ZeRO 1 and 2 all-gather the updated parameters.
  void step(float lr);

  int step_count() const { return adam_->step_count(); }
  const AdamW& adamw() const { return *adam_; }
  AdamW& adamw() { return *adam_; }

  // Seconds this rank has spent blocked waiting for gradient reductions since the last reset: the
  // part of their time backward did not hide.
  double reduction_wait_seconds() const { return wait_seconds_; }
  void reset_reduction_wait() { wait_seconds_ = 0; }
  // Runs one step's gradient reductions (every unit's, `microbatches` times for ZeRO 2/3) alone and
  // blocking, and returns their seconds: what they would cost if nothing hid them. Overwrites the
  // gradients; for benchmarks, between steps.
  double time_reductions_alone(int microbatches);

  // Checkpoints. The chunk's training state this rank holds, at the offsets OwnedPart::at of
  // model::zero_owned_parts(layout, zero(), dp size, dp rank): the parameters (from ZeRO 1 on,
  // the fp32 master shard) and AdamW's moments. ZeRO 0: the chunk's whole buffers.
  struct StateView {
    float* params;
    float* m;
    float* v;
  };
  StateView state();
  // After a checkpoint was loaded into state(), on every dp rank: sets the step count and
  // rebuilds the model's parameters from the shards (ZeRO 1/2: an all-gather; ZeRO 3: dropped,
  // gathered when used).
  void state_loaded(int step_count);

 private:
  struct Shard {                  // a unit's range in the shard buffers
    int64_t begin = 0, size = 0;  // this rank's range, relative to the unit's first element
    int64_t offset = 0;           // where it sits in master_, grad_shard_ and the moments
  };
  struct Pending {           // a unit's reduction in flight
    int unit = 0, tmp = -1;  // tmp: its receive buffer in tmp_ (ZeRO 2/3)
    comm::Work work;
  };
  const model::ParamUnit& unit(int u) const { return model_.param_layout().units[u]; }
  // A unit's range padded to dp equal shards: what its collectives read or write.
  int64_t padded(int u) const { return shards_[u].size * dp_->size(); }
  void complete_oldest();
  void gather_all();

  model::Gpt& model_;
  std::unique_ptr<comm::Communicator> local_dp_;  // stands in when there is no dp group
  comm::Communicator* dp_ = nullptr;
  int zero_ = 0;
  bool final_pass_ = true;
  std::vector<Shard> shards_;
  std::vector<model::GradPart> parts_;
  std::vector<int64_t> part_begin_;  // ZeRO >= 1: each part's first element in the model's layout
  std::unique_ptr<AdamW> adam_;
  AlignedBuffer<float> master_, grad_shard_;  // ZeRO >= 1
  std::vector<AlignedBuffer<float>> tmp_;     // ZeRO >= 2: reduce-scatter outputs in flight
  int next_tmp_ = 0;
  std::vector<Pending> pending_;  // oldest first, at most model::kZeroBucketsInFlight
  // ZeRO 2/3: the units in use, in pool_: their full gradients from the first write of a pass until
  // reduced (grad_slot_), ZeRO 3 their parameters from gather to release (param_slot_).
  std::unique_ptr<UnitPool> own_pool_;
  UnitPool* pool_;
  std::vector<float*> grad_slot_, param_slot_;
  // ZeRO 1-3: whether a unit's gradient shard has received this step's first reduction (which
  // goes straight into it; from ZeRO 2 on later ones arrive in tmp_ and are added).
  std::vector<bool> shard_started_;
  double wait_seconds_ = 0;
};

}  // namespace weft::optim
