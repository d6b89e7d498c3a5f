#pragma once
// A GPT-2 model, serial or split across a tensor-parallel group: parameters and gradients in flat
// buffers (this rank's shards, param_layout.h), activations in the layout of activation_layout.h,
// forward keeping what backward needs, backward with optional recomputation: embedding, L pre-LN
// transformer blocks (layer_forward), then the head (final LayerNorm, logits through the tied
// embedding, cross-entropy).
//
// Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019): attention heads and the MLP's 4C
// dimension are split (column-parallel qkv and fc, row-parallel proj), the vocabulary is split
// for the tied embedding and the LM head, and the cross-entropy never gathers the logits. With
// sequence parallelism (Korthikanti et al. 2022) the LayerNorm and residual regions run on N/t
// rows each, with all-gather / reduce-scatter in place of the all-reduces. Every loss and gathered
// parameter equals the serial model's up to float rounding (tests/parallel).
//
// Under pipeline parallelism a Gpt is one stage (a model chunk, StageSpec): its layers, plus the
// embedding on the first stage and the head on the last. It keeps the activations of `slots`
// microbatches at once (a pipeline rank has several in flight); the executor moves the stage's
// input and output activations and gradients between ranks (stage_input, stage_output,
// output_grad, input_grad).
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/kernels/backend.h"
#include "weft/model/gpt_config.h"
#include "weft/model/param_hooks.h"
#include "weft/model/param_layout.h"
#include "weft/model/recompute.h"
#include "weft/parallel/tp_ops.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::model {

// How a stage's parameter and gradient buffers are laid out and who holds them (ZeRO,
// optim/distributed_optimizer.h).
struct ParamStorage {
  int64_t unit_align = BufferLayout::kAlignElems;  // see gpt_param_layout
  // false: the model allocates no such buffer; its ParamHooks hold every unit's parameters (ZeRO-3)
  // or gradients (ZeRO-2/3) while in use, and must be installed before the first forward.
  bool model_params = true;
  bool model_grads = true;
};

// A run of one parameter's gradient elements: a whole slice, or the part of it in a ZeRO shard.
struct GradPart {
  size_t slice = 0;  // index into param_layout().buffer.slices()
  float* grad = nullptr;
  int64_t n = 0;
};

class Gpt {
 public:
  // Allocates for batches up to B x T (validated first, including the split across tp: throws
  // weft::Error listing every problem).
  // Its ops run on `backend` (kernels/backend.h; null: the process's host fp32 backend), which
  // must be an FP32 one for now and outlive the model: the model's buffers are host memory.
  Gpt(const GptConfig& cfg, int B, int T, Recompute recompute = Recompute::None,
      parallel::TensorParallel tp = {}, StageSpec stage = {}, int slots = 1,
      ParamStorage storage = {}, kernels::Backend* backend = nullptr);

  const GptConfig& config() const { return cfg_; }
  const ParamLayout& param_layout() const { return layout_; }
  Recompute recompute() const { return recompute_; }
  const parallel::TensorParallel& tensor_parallel() const { return tp_; }
  const StageSpec& stage() const { return stage_; }
  int slots() const { return static_cast<int>(acts_.size()); }
  int max_batch() const { return B_; }
  int max_seq() const { return T_; }

  // The model's own buffers, in param_layout()'s order; empty when ParamStorage gave them to the
  // hooks.
  FlatBuffer& params() { return params_; }
  const FlatBuffer& params() const { return params_; }
  FlatBuffer& grads() { return grads_; }
  const FlatBuffer& grads() const { return grads_; }

  void init(uint64_t seed);
  void zero_grad() { grads_.zero(); }
  // Told about every use of parameters and gradients from now on (null: nobody).
  void set_param_hooks(ParamHooks* hooks) { hooks_ = hooks; }

  // tokens, targets: [B,T] with B <= max_batch(), T <= max_seq(); a target < 0 is ignored.
  // Every tp rank passes the same batch. Returns the mean loss over the non-ignored targets. With
  // targets == nullptr only logits are computed (inference) and 0 is returned.
  // A stage without the embedding reads stage_input(slot) instead of tokens (tokens may be null);
  // a stage without the head leaves its output in stage_output(slot), ignores targets and
  // returns 0. Both arrays must stay valid until the slot's backward.
  // `loss_scale` is the scale of the backward() that may follow (1/k to average over k
  // accumulated microbatches): the fused softmax + cross-entropy (backend.h) writes
  // d(loss_scale * mean loss)/d(logits) over the logits here, in the forward, as llm.c and
  // Megatron's fused kernels do, so the logits are read once.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T, int slot = 0,
                float loss_scale = 1.0f);
  // Back-propagates the slot's forward: grads += loss_scale * d(mean loss)/d(params), with the
  // forward's loss_scale. A stage without the head starts from output_grad(slot) (already scaled)
  // instead; one without the embedding leaves the gradient of its input in input_grad().
  // With defer_weight_grads only the input gradients are computed (a zero-bubble schedule's I
  // pass); backward_weights(slot) then adds the weight gradients (its W pass). Deferring keeps
  // copies of the linear layers' output gradients until then, and needs each layer's inputs kept
  // (recompute none or selective).
  void backward(int slot = 0, bool defer_weight_grads = false);
  // The loss scale moved to forward(): a call in the old form does not compile.
  void backward(float) = delete;
  void backward(float, int) = delete;
  void backward(float, int, bool) = delete;
  void backward_weights(int slot = 0);

  // The stage boundary, [Ns,C] each (Ns = B*T, or B*T/tp with sequence parallelism).
  float* stage_input(int slot) { return acts_.at(slot).ptr("embed"); }
  const float* stage_output(int slot) const;
  float* output_grad(int slot) { return acts_.at(slot).ptr("d.output"); }
  // Valid after backward() until the next backward() of any slot.
  const float* input_grad() const { return work_.ptr("d.residual"); }

  // After the last backward of a step: with sequence parallelism each rank's LayerNorm gradients
  // cover only its rows, so they are summed over the tp group (once per step, as Megatron-LM's
  // allreduce_layernorm_grads), in one call over the LayerNorm parts of `parts`. A no-op
  // otherwise. Every tp rank passes the same parts (their layouts are equal).
  void finish_grad_sync(std::span<const GradPart> parts);
  void finish_grad_sync() { finish_grad_sync(whole_grads()); }
  // Every slice's gradient, whole.
  std::vector<GradPart> whole_grads() const;

  // [B,T,Vp/tp] logits of the last forward without targets: this rank's vocabulary columns (a
  // forward with targets overwrites them with their gradient).
  const float* logits(int slot = 0) const { return acts_.at(slot).ptr("logits"); }

 private:
  struct LayerActs;
  LayerActs layer_acts(FlatBuffer& acts, int l);
  void layer_forward(int l, const float* in, const LayerActs& a, FlatBuffer& acts, int B, int T);
  // The conjugate operators around the tensor-parallel regions (see gpt.cc).
  void layernorm_gathered(float* full, float* mean, float* rstd, const float* in, const float* w,
                          const float* b, int N, FlatBuffer& acts);
  void reduce_partial(float* out, float* partial, int N);
  const float* gather_grad(float* d_res, int N);
  float* reduce_grad(float* d_partial, int N);

  // ParamHooks calls, when there are hooks and the stage has the unit.
  void gather(int unit);
  void release(int unit);
  void grads_ready(int unit) {
    if (hooks_ != nullptr && unit >= 0) hooks_->grads_ready(unit);
  }
  // A parameter's or gradient's elements wherever its unit is held now (ParamHooks): the
  // parameters of a unit between gather and release; the gradients of any unit (the hooks may
  // hand out memory for them now).
  const float* param(const std::string& name) const;
  float* grad(const std::string& name);
  // The unit holding slice `name`, and the slice's offset from the unit's first element.
  std::pair<int, int64_t> locate(const std::string& name) const;
  int layer_unit(int l) const { return first_layer_unit_ + (l - stage_.first_layer); }

  GptConfig cfg_;
  kernels::Backend& be_;
  int B_, T_;
  Recompute recompute_;
  parallel::TensorParallel tp_;
  bool sp_ = false;  // sequence parallelism in effect (tp > 1)
  StageSpec stage_;
  ParamLayout layout_;
  FlatBuffer params_, grads_, work_;
  ParamHooks* hooks_ = nullptr;
  std::vector<const float*> unit_params_;  // each unit's parameter base; null: not gathered
  int wte_unit_ = -1, wpe_unit_ = -1, ln_f_unit_ = -1, first_layer_unit_ = -1;
  std::vector<FlatBuffer> acts_;  // one per slot
  // A weight-gradient GEMM left for backward_weights(): dweight (+)= dout^T @ inp, dbias (+)=.
  // The gradients are named, not pointed to: their unit's memory may move before then (ZeRO-2/3
  // reduce and hand back a unit's gradients after each pass).
  struct Deferred {
    std::string dweight, dbias;  // dbias empty: none
    const float* inp;
    std::vector<float> dout_copy;  // when the slot does not keep dout
    const float* dout;             // else: dout in the slot's activations
    int N, IC, OC;
  };
  // Each slot's last forward.
  struct Pending {
    const int32_t* tokens = nullptr;
    const int32_t* targets = nullptr;
    int B = 0, T = 0;
    int64_t valid_targets = 0;
    bool backward_due = false, weights_due = false;
    std::vector<Deferred> deferred;
    std::vector<float> d_embed;  // the embedding output's gradient, when deferred
  };
  void embedding_weight_grads(const Pending& p, const float* d_embed);
  std::vector<Pending> pending_;
};

}  // namespace weft::model
