#pragma once
// THE GPT model of weft (GPT-2, or the Llama-style variants of gpt_config.h), written once against
// the backend contract (kernels/backend.h) and run on any backend in its precision: host fp32, host
// bf16, CUDA. Serial or split across a tensor-parallel group: parameters and gradients in flat
// buffers (this rank's shards, param_layout.h), activations in the layouts of activation_layout.h,
// forward keeping what backward needs, backward with optional recomputation: embedding, L pre-norm
// transformer blocks (layer_forward), then the head (final norm, logits through the tied
// embedding or lm_head, cross-entropy).
//
// Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019): query and key/value heads and the
// MLP's F dimension are split (column-parallel qkv and fc, row-parallel proj), the vocabulary is
// split for the embedding and the LM head, and the cross-entropy never gathers the logits. With
// sequence parallelism (Korthikanti et al. 2022) the LayerNorm and residual regions run on N/t
// rows each, with all-gather / reduce-scatter in place of the all-reduces. Every loss and gathered
// parameter equals the serial model's up to float rounding (tests/parallel).
//
// Under pipeline parallelism a Gpt is one stage (a model chunk, StageSpec): its layers, plus the
// embedding on the first stage and the head on the last. It keeps the activations of `slots`
// microbatches at once (a pipeline rank has several in flight); the executor moves the stage's
// input and output activations and gradients between ranks (stage_input, ForwardOut::output,
// output_grad, input_grad).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/kernels/backend.h"
#include "weft/model/activation_layout.h"
#include "weft/model/gpt_config.h"
#include "weft/model/param_layout.h"
#include "weft/model/recompute.h"
#include "weft/optim/params.h"
#include "weft/parallel/tp_ops.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::model {

// Where a forward's results go besides the slot, when a runtime runs a step's microbatches
// (runtime/pipeline_runner.h).
struct ForwardOut {
  // A stage without the head: where it writes its output, [Ns,C] activations in the backend's
  // memory (the pipeline's send buffer: the slot does not keep it, no backward reads it);
  // required there.
  kernels::Act* output = nullptr;
  // The last stage with targets: its mean loss is added to *loss_sum, in the backend's memory
  // (Backend::add_mean), and forward returns 0, so a step's microbatches cost no host wait on a
  // device. Null: the mean comes back to the host and forward returns it.
  double* loss_sum = nullptr;
};

// The parameters it holds are driven by the optimizer that owns them (ZeRO: optim::Params).
class Gpt final : public optim::Params {
 public:
  // Allocates for batches up to B x T (validated first, including the split across tp: throws
  // weft::Error listing every problem), everything from `backend` (kernels/backend.h), which must
  // outlive the model; null: a host FP32 backend of the model's own. The backend's precision is
  // the model's: FP32, or BF16Mixed (fp32 master weights and gradients, bf16 activations and a
  // bf16 copy of the weights that the forward reads: Micikevicius et al. 2018). Every buffer is
  // taken at construction, from the layouts the memory model counts (activation_layout.h), except
  // the deferred weight gradients' (zb-h1), taken at the first backward that defers them.
  // `share_slots`: another stage's model on the same backend with `slots` slots of this one's
  // slot layout sizes, whose slot memory this one uses too (a pipeline rank's chunks share one
  // pool of slots, and each slot is held by one chunk's microbatch at a time: layout/rank.h).
  Gpt(const GptConfig& cfg, int B, int T, Recompute recompute = Recompute::None,
      parallel::TensorParallel tp = {}, StageSpec stage = {}, int slots = 1,
      optim::ParamStorage storage = {}, kernels::Backend* backend = nullptr,
      const Gpt* share_slots = nullptr);
  ~Gpt() override;
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return cfg_; }
  const ParamLayout& param_layout() const override { return layout_; }
  const parallel::TensorParallel& tensor_parallel() const { return tp_; }
  const StageSpec& stage() const { return stage_; }
  int slots() const { return static_cast<int>(acts_.size()); }
  kernels::Backend& backend() const override { return be_; }
  Precision precision() const { return precision_; }

  // optim::Params. params() and grads() are views (host memory on the host backends, device
  // memory on CUDA, where only their addresses may be used); whoever updates params() refreshes
  // read_copy() (refresh_read_copy, or AdamW's params16).
  bool weight_decay(size_t slice) const override { return layout_.init[slice].weight_decay; }
  FlatBuffer& params() override { return params_; }
  const FlatBuffer& params() const { return params_; }
  FlatBuffer& grads() override { return grads_; }
  const FlatBuffer& grads() const { return grads_; }
  BF16* read_copy() const override { return read_copy_; }
  void refresh_read_copy(int64_t at, int64_t n) override;
  void init(uint64_t seed) override;
  void init_part(size_t slice, uint64_t seed, int64_t begin, int64_t n, float* out) const override {
    init_slice(layout_, slice, seed, begin, n, out);
  }
  void set_param_hooks(optim::ParamHooks* hooks) override { hooks_ = hooks; }

  // Host <-> backend copies of the master weights and gradients (buffer.total() elements);
  // set_params also refreshes the read copy.
  void set_params(std::span<const float> host);
  void get_params(std::span<float> host) const;
  void get_grads(std::span<float> host) const;
  void zero_grad();

  // tokens, targets: [B,T] host arrays with B, T at most the constructor's; a target < 0 is
  // ignored. Every tp rank passes the same batch. Returns the mean loss over the non-ignored
  // targets. With targets == nullptr only logits are computed (inference) and 0 is returned.
  // A stage without the embedding reads stage_input(slot) instead of tokens (tokens may be null);
  // a stage without the head writes its output to out.output, ignores targets and
  // returns 0. Both arrays must stay valid until the slot's backward.
  // `loss_scale` is the scale of the backward() that may follow (1/k to average over k
  // accumulated microbatches): the fused softmax + cross-entropy (backend.h) writes
  // d(loss_scale * mean loss)/d(logits) over the logits here, in the forward, as llm.c and
  // Megatron's fused kernels do, so the logits are read once.
  // `out`: see ForwardOut. The batch goes to the backend without a host wait
  // (Backend::upload_async).
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T, int slot = 0,
                float loss_scale = 1.0f, const ForwardOut& out = ForwardOut{});
  // The mean of losses[N] over the targets that are not ignored (>= 0), summed in double; 0 when
  // every target is ignored.
  static float mean_loss(const float* losses, const int32_t* targets, int N);
  // Back-propagates the slot's forward: grads += loss_scale * d(mean loss)/d(params), with the
  // forward's loss_scale. A stage without the head starts from output_grad(), which the caller
  // has just written (already scaled); one without the embedding leaves the gradient of its
  // input in input_grad().
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

  // The stage boundary, [Ns,C] activations each (Ns = B*T, or B*T/tp with sequence parallelism),
  // in the backend's memory. The input a slot's forward reads (kept: the first layer's input).
  kernels::Act* stage_input(int slot) { return acts_.at(slot).act("embed"); }
  // Where the gradient of the stage's output goes right before the backward() that reads it:
  // the workspace's residual-stream gradient, one per model, not per slot (nothing is kept for a
  // backward that has not started).
  kernels::Act* output_grad() { return work_.act("d.residual"); }
  // The gradient of the stage's input: valid after backward() until the next backward() or
  // output_grad() write (the same buffer).
  const kernels::Act* input_grad() const { return work_.act("d.residual"); }

  // After the last backward of a step: with sequence parallelism each rank's LayerNorm gradients
  // cover only its rows, so they are summed over the tp group (once per step, as Megatron-LM's
  // allreduce_layernorm_grads), in one call over the LayerNorm parts of `parts`. A no-op
  // otherwise. Every tp rank passes the same parts (their layouts are equal).
  void finish_grad_sync(std::span<const optim::GradPart> parts);
  void finish_grad_sync() { finish_grad_sync(whole_grads()); }
  // Every slice's gradient, whole.
  std::vector<optim::GradPart> whole_grads() const;

  // [B,T,Vp/tp] logits of the last forward without targets: this rank's vocabulary columns (a
  // forward with targets overwrites them with their gradient). Host FP32 only.
  const float* logits(int slot = 0) const;

 private:
  // A layout's two blocks of the backend's memory (activation_layout.h).
  struct Blocks {
    ActivationLayout layout;
    kernels::Act* act_base = nullptr;
    float* f32_base = nullptr;
    int64_t act_size = 4;  // bytes per activation element
    kernels::Act* act(const std::string& name) const;
    float* f32(const std::string& name) const { return f32_base + layout.f32.at(name).offset; }
  };
  Blocks allocate(ActivationLayout layout);
  // get_params and get_grads: `from` (params_ or grads_) into host, checked for size.
  void download(const FlatBuffer& from, std::span<float> host, const char* what) const;
  struct LayerActs;
  LayerActs layer_acts(const Blocks& acts, int l) const;
  void layer_forward(int l, const kernels::Act* in, const LayerActs& a, int B, int T);
  // The conjugate operators around the tensor-parallel regions (see gpt.cc).
  void layernorm_gathered(kernels::Act* full, float* mean, float* rstd, const kernels::Act* in,
                          const kernels::Act* w, const kernels::Act* b, int N);
  void reduce_partial(kernels::Act* out, kernels::Act* partial, int N);
  const kernels::Act* gather_grad(const kernels::Act* d_res, int N);
  const kernels::Act* reduce_grad(kernels::Act* d_partial, int N);
  // The tp group's collectives on activations, in their precision (bf16 summed in bf16).
  comm::Payload act_payload(int64_t n) const;
  void tp_all_gather(kernels::Act* full, const kernels::Act* local, int64_t n_local);
  void tp_all_reduce(kernels::Act* x, int64_t n);
  void tp_reduce_scatter(kernels::Act* local, const kernels::Act* full, int64_t n_local);

  // ParamHooks calls, when there are hooks and the stage has the unit.
  void gather(int unit);
  void release(int unit);
  void grads_ready(int unit) {
    if (hooks_ != nullptr && unit >= 0) hooks_->grads_ready(unit);
  }
  // A parameter (as the forward reads it: the read copy under BF16Mixed) or gradient wherever
  // its unit is held now (ParamHooks): the parameters of a unit between gather and release; the
  // gradients of any unit (the hooks may hand out memory for them now).
  const kernels::Act* param(const std::string& name) const;
  float* grad(const std::string& name);
  // The same, or null when the variant has no such parameter (biases, wpe).
  const kernels::Act* param_or_null(const std::string& name) const;
  float* grad_or_null(const std::string& name);
  // The LM head's weight: the tied wte, or lm_head.
  const char* head_name() const { return cfg_.tie_embeddings ? "wte" : "lm_head"; }
  // ln_f's saved mean, null under RMSNorm.
  float* ln_f_mean(const Blocks& acts) const;
  // The unit holding slice `name`, and the slice's offset from the unit's first element.
  std::pair<int, int64_t> locate(const std::string& name) const;
  int layer_unit(int l) const { return first_layer_unit_ + (l - stage_.first_layer); }

  GptConfig cfg_;
  std::unique_ptr<kernels::Backend> own_backend_;  // when the caller gave none
  kernels::Backend& be_;
  Precision precision_;
  int B_, T_;
  Recompute recompute_;
  parallel::TensorParallel tp_;
  bool sp_ = false;  // sequence parallelism in effect (tp > 1)
  StageSpec stage_;
  ParamLayout layout_;
  FlatBuffer params_, grads_;
  BF16* read_copy_ = nullptr;
  std::vector<Blocks> acts_;  // one per slot
  Blocks work_;
  optim::ParamHooks* hooks_ = nullptr;
  std::vector<const kernels::Act*> unit_params_;  // each unit's parameter base; null: not gathered
  int wte_unit_ = -1, wpe_unit_ = -1, ln_f_unit_ = -1, first_layer_unit_ = -1;
  int head_unit_ = -1;  // the unit of head_name(): wte_unit_ when tied
  kernels::Norm norm_;  // the model's norm (LayerNorm or RMSNorm) and its epsilon
  // A weight-gradient GEMM left for backward_weights(): dweight (+)= dout^T @ inp, dbias (+)=.
  // The gradients are named, not pointed to: their unit's memory may move before then (ZeRO-2/3
  // reduce and hand back a unit's gradients after each pass).
  struct Deferred {
    std::string dweight, dbias;  // dbias empty: none
    const kernels::Act* inp;
    const kernels::Act* dout;  // the slot's own dlogits, or a copy in the slot's deferred block
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
    kernels::Act* deferred_block = nullptr;  // deferred_grad_elements, taken at the first I pass
    int64_t deferred_used = 0;               // elements of it in use
    const kernels::Act* d_embed = nullptr;   // the embedding output's gradient, when deferred
  };
  // A copy of n elements of `src` in the slot's deferred block.
  const kernels::Act* keep(Pending& p, const kernels::Act* src, int64_t n);
  void embedding_weight_grads(const Pending& p, const kernels::Act* d_embed);
  std::vector<Pending> pending_;
};

}  // namespace weft::model
