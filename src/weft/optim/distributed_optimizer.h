#pragma once
// The optimizer of one model chunk, data-parallel with ZeRO stage 0-3 (Rajbhandari et al. 2020,
// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", §5; the stage-1 form is
// Megatron-LM's distributed optimizer). It owns the chunk's parameters through the small interface
// of params.h (model::Gpt implements it) and is their ParamHooks: the chunk tells it when each
// unit (a layer, the embeddings, ln_f; ParamUnit) is used and when the unit's
// gradients of a backward pass are complete, and it starts that unit's gradient reduction at
// once, asynchronously, so reductions overlap the rest of backward (the buckets of PyTorch DDP,
// Li et al. 2020, are our units). At most kZeroBucketsInFlight are in flight: each holds
// MPI's temporaries (and from ZeRO 2 on the unit's full gradient) until it completes.
//
//   stage  gradients reduced                          kept per rank                   after step
//   0      all-reduce per unit, last microbatch       params, grads, m, v             -
//   1      reduce-scatter per unit, last microbatch   params, grads; shard of m, v,   all-gather
//                                                     master params, reduced grads    params
//   2      reduce-scatter per unit, EVERY microbatch, params; shard of grads, m, v,   all-gather
//          into the shard (each pass's gradients      master params; full grads only  params
//          start from the sum so far in this rank's   of the units in use
//          block); the unit's full gradient buffer
//          then goes back to the pool
//   3      as 2                                       shards only; a unit's params    -
//                                                     are all-gathered into a pool
//                                                     buffer before each use and
//                                                     given back after
//
// Shards are per unit: rank r holds the r-th of dp equal aligned ranges of every unit
// (shards.h). From ZeRO-2 on the model has no gradient buffer (from ZeRO-3 on no
// parameter buffer) of its own (ParamStorage): the units in use live in a pool of
// unit-sized buffers (unit_pool.h), each the unit's range padded to dp shards, where the
// collectives run in place; the model finds them through ParamHooks. The replicas' gradients are
// summed (the forward's loss scale is 1/(m * dp): the mean over every replica's microbatches).
// With dp = 1 (or no dp group) every stage degenerates to the plain optimizer with extra copies.
//
// Every buffer is the model's backend's (kernels/backend.h), and so is every operation on one:
// zeroing, the sum of a shard's microbatches (Backend::accumulate), AdamW (one Backend::AdamW plan
// over the parts), so the one optimizer runs on host fp32, host bf16 and CUDA. Under BF16Mixed
// the forward reads a bf16 copy of the weights: ZeRO 0 keeps the model's (AdamW writes it), ZeRO
// 1-3 a bf16 copy of the master shard, which is what is all-gathered (half the bytes of fp32, as
// Megatron-LM's distributed optimizer gathers its bf16 parameters) into the model's read copy
// (ZeRO 1/2) or a pool buffer (ZeRO 3). The collectives run on `dp`, which must reach the
// backend's memory (comm/cuda for a GPU); the backend is synchronized before each is started.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/core/dtype.h"
#include "weft/kernels/backend.h"
#include "weft/optim/adamw.h"
#include "weft/optim/params.h"
#include "weft/optim/unit_pool.h"

namespace weft::optim {

class DistributedOptimizer final : public ParamHooks {
 public:
  // How a chunk's buffers must be laid out and held for `zero` over `dp` ranks: units aligned to
  // dp * 16 elements (so every unit's padded range fits before the next unit, and shards are
  // aligned); from ZeRO-1 on the fp32 master weights (bf16: the model keeps its read copy only),
  // from ZeRO-2 on the gradients, from ZeRO-3 on also the weights the forward reads, held here.
  static ParamStorage storage(int zero, int dp);

  // `params` (a model chunk) must have been built with storage(zero, dp size); `dp` may be null
  // (one replica), else the replicas' group on the chunk's backend's memory. Installs itself as
  // the chunk's ParamHooks. `pool` (on the model's backend; it must outlive the optimizer) may be
  // shared by the optimizers of one rank's chunks, whose passes never overlap (ZeRO 2/3 complete
  // every reduction at the end of each pass); null: its own.
  DistributedOptimizer(Params& params, comm::Communicator* dp, int zero, AdamWConfig cfg = {},
                       UnitPool* pool = nullptr);
  ~DistributedOptimizer() override;
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  int zero() const { return zero_; }
  int dp_size() const { return dp_->size(); }
  // Initializes the parameters: ZeRO 0 the whole chunk; ZeRO 1-3 only this rank's parts, into the
  // master shard (ZeRO 1/2 then all-gather the model's copy).
  void init(uint64_t seed);
  // Whether the next backward (or weight-gradient) pass is the chunk's last of the step: ZeRO 0
  // and 1 reduce only then, over the accumulated gradients.
  void set_final_pass(bool final_pass) { final_pass_ = final_pass; }

  // ParamHooks
  const void* gather(int unit) override;
  void release(int unit) override;
  float* grads(int unit) override;
  void grads_ready(int unit) override;
  void backward_done() override;

  // After the step's last pass: finishes every reduction (Work::order; runtime::finish_step then
  // bounds the device's waits on the group before the host reads the gradients' norm).
  void finish_reduction();
  // The replicas' group the reductions and gathers run on (a group of one when there is none).
  comm::Communicator& dp_group() const { return *dp_; }
  // The gradients the rest of the step works on, in the backend's memory: whole slices (ZeRO 0)
  // or this rank's shard.
  std::span<const GradPart> grad_parts() const { return parts_; }
  // Whether grad_parts() are this rank's shard, which the replicas' norms must be summed over.
  bool sharded() const { return zero_ > 0 && dp_->size() > 1; }
  // AdamW on grad_parts(), each gradient multiplied by `grad_scale` first (the clipping factor);
  // then ZeRO 1 and 2 all-gather the updated weights.
  void step(float lr, float grad_scale = 1.0f);

  int step_count() const { return t_; }
  const AdamWConfig& config() const { return cfg_; }
  kernels::Backend& backend() const { return be_; }

  // Seconds this rank has spent blocked waiting for gradient reductions since the last reset: the
  // part of their time backward did not hide.
  double reduction_wait_seconds() const { return wait_seconds_; }
  void reset_reduction_wait() { wait_seconds_ = 0; }
  // Runs one step's gradient reductions (every unit's, `microbatches` times for ZeRO 2/3) alone and
  // blocking, and returns their seconds: what they would cost if nothing hid them. Overwrites the
  // gradients; for benchmarks, between steps.
  double time_reductions_alone(int microbatches);

  // Checkpoints. The chunk's training state this rank holds, in the backend's memory, at the
  // offsets OwnedPart::at of zero_owned_parts(layout, zero(), dp size, dp rank): group 0
  // the fp32 parameters (from ZeRO 1 on the master shard), 1 and 2 AdamW's moments. ZeRO 0: the
  // chunk's whole buffers. state(): where (host memory only where Backend::host_memory()).
  struct StateView {
    float* params;
    float* m;
    float* v;
  };
  StateView state();
  // Elements [at, at + n) of a group, to or from host memory (through the backend's copies).
  void read_state(int group, int64_t at, int64_t n, float* out);
  void write_state(int group, int64_t at, int64_t n, const float* in);
  // The floats of each group (ZeRO 0: the chunk's buffer; else the shard).
  int64_t state_floats() const;
  // A copy of a whole group into host memory `out` (state_floats() floats) for an asynchronous
  // checkpoint: a device's copy does not make the host wait (complete after the backend's
  // wait_downloads()), and the next step's update is ordered after it.
  void snapshot_state(int group, float* out);
  // After a checkpoint was loaded into the state, on every dp rank: sets the step count, rounds
  // the weights' bf16 copy (BF16Mixed) and rebuilds the model's weights from the shards (ZeRO 1/2:
  // an all-gather; ZeRO 3: dropped, gathered when used).
  void state_loaded(int step_count);

 private:
  struct Pending {  // a unit's reduction in flight
    int unit = 0;
    comm::Work work;
  };
  const ParamUnit& unit(int u) const { return model_.param_layout().units[u]; }
  // A unit's range padded to dp equal shards: what its collectives read or write.
  int64_t padded(int u) const { return shards_[u].size * dp_->size(); }
  // How `elements` of the weights the forward reads (fp32 under FP32, bf16 under BF16Mixed) go to
  // a communicator.
  comm::Payload read_payload(int64_t elements) const {
    return comm::payload_of(elements, act_bytes_);
  }
  // Element `at` of the model's read weights (ZeRO 0-2) and of the read shard (ZeRO 1-3).
  void* model_read(int64_t at) const;
  const void* shard_read(int64_t at) const;
  float* state_group(int group);
  void complete_oldest();
  void gather_all();

  Params& model_;
  kernels::Backend& be_;
  int64_t act_bytes_ = 4;
  std::unique_ptr<comm::Communicator> local_dp_;  // stands in when there is no dp group
  comm::Communicator* dp_ = nullptr;
  int zero_ = 0;
  AdamWConfig cfg_;
  bool final_pass_ = true;
  // ZeRO >= 1: each unit's range in the shard buffers (master_, grad_shard_ and the moments).
  std::vector<UnitShard> shards_;
  std::vector<GradPart> parts_;
  // AdamW: the moments (laid out like the parameters, ZeRO 0, or like the shard), the plan over
  // the parts, the step count.
  float* m_ = nullptr;
  float* v_ = nullptr;
  std::unique_ptr<kernels::Backend::AdamW> adam_;
  int t_ = 0;
  // ZeRO >= 1: the master shard, its bf16 copy (BF16Mixed), the reduced gradient shard.
  float* master_ = nullptr;
  BF16* master16_ = nullptr;
  float* grad_shard_ = nullptr;
  int64_t shard_elements_ = 0;
  std::vector<Pending> pending_;  // oldest first, at most kZeroBucketsInFlight
  // ZeRO 2/3: the units in use, in pool_: their full gradients from the first write of a pass until
  // reduced (grad_slot_), ZeRO 3 their read weights from gather to release (param_slot_).
  std::unique_ptr<UnitPool> own_pool_;
  UnitPool* pool_;
  std::vector<float*> grad_slot_;
  std::vector<void*> param_slot_;
  // ZeRO 1-3: whether a unit's gradient shard has received a reduction this step (from ZeRO 2 on,
  // the next pass's gradients then start from it in this rank's block; grads()).
  std::vector<bool> shard_started_;
  double wait_seconds_ = 0;
};

}  // namespace weft::optim
