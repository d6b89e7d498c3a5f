#pragma once
// A GPT-2 model in mixed precision on a kernels::Backend: the GPU trainer's model
// (`weft train --device cuda`, docs/cuda.md). Micikevicius et al. 2018: fp32 master weights,
// gradients and (runtime/device_trainer.h) AdamW state; bf16 activations and a bf16 copy of the
// weights that the forward reads. The same architecture, parameter layout (param_layout.h) and
// initialization as model::Gpt, so a MixedGpt starts from exactly the serial fp32 model's values
// and the two train to the same losses within bf16 tolerance
// (tests/runtime/device_trainer_test.cc).
//
// A MixedGpt is one pipeline stage (the whole model by default) holding the activations of
// `slots` microbatches, and this rank's tensor-parallel shards, like model::Gpt;
// runtime/device_trainer.h moves the stage boundaries between ranks. Everything is allocated
// once, at construction, from the backend, walking mixed_layout.h's list of buffers, the list
// the memory model (memory.h, Precision::BF16Mixed) counts beforehand; a step allocates nothing.
//
// A block, with x the bf16 residual stream (llm.c's layout: each residual add fused into the
// LayerNorm that follows it):
//   ln_1 = LN(x_l)                        (fused with x_l = res_attn_{l-1} + mlp_{l-1} for l > 0)
//   qkv = ln_1 Wqkv^T + b;  atty, lse = flash attention(qkv)
//   res_attn = x_l + (atty Wproj^T + b);  ln_2 = LN(res_attn)          (one fused kernel)
//   fc_gelu = gelu(fc_pre), fc_pre = ln_2 Wfc^T + b                  (GeLU in the GEMM epilogue)
//   mlp = fc_gelu Wmlp^T + b;  x_{l+1} = res_attn + mlp               (fused into the next LN)
// then ln_f, the logits through the tied wte [Vp, C], and the fused softmax + cross-entropy,
// which writes the logits' gradient in place during the forward: forward() is told the scale of
// the backward that follows.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/kernels/backend.h"
#include "weft/model/gpt_config.h"
#include "weft/model/mixed_layout.h"
#include "weft/model/param_layout.h"
#include "weft/model/recompute.h"

namespace weft::model {

class MixedGpt {
 public:
  // Allocates everything for batches up to B x T from `backend` (which must outlive the model):
  // the parameters of `stage` (a pipeline stage: param_layout.h) and the activations of `slots`
  // microbatches in flight. Validates first (throws weft::Error listing every problem, including
  // head sizes the backend's attention does not take).
  //
  // Recomputation (Korthikanti et al. 2022): flash attention never stores the T x T matrix, so
  // Selective is None here; Full keeps only each layer's input per microbatch and reruns the
  // layer's forward into one shared set of buffers before its backward (bit-identical gradients:
  // the same kernels on the same inputs).
  //
  // Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) over `tp`, a communicator on the
  // backend's memory (null: one rank): this rank holds its shards of param_layout.h's tp layout
  // (heads and the MLP's 4C column- and row-split, the vocabulary split for the tied embedding and
  // the LM head); the row-parallel partial sums and the column-parallel input gradients (bf16)
  // are summed in fp32 (widened, all-reduced, rounded), the embedding is vocabulary-parallel and
  // the cross-entropy never gathers the logits, only three statistics per row. Every rank gets the
  // same batch and computes the replicated tensors identically. No sequence parallelism.
  MixedGpt(kernels::Backend& backend, const GptConfig& cfg, int B, int T, StageSpec stage = {},
           int slots = 1, Recompute recompute = Recompute::None, comm::Communicator* tp = nullptr);

  const GptConfig& config() const { return cfg_; }
  const ParamLayout& param_layout() const { return layout_; }
  const StageSpec& stage() const { return stage_; }
  Recompute recompute() const { return recompute_; }
  kernels::Backend& backend() const { return backend_; }
  int max_batch() const { return B_; }
  int max_seq() const { return T_; }
  int slots() const { return static_cast<int>(slots_.size()); }
  int tp_rank() const { return r_; }

  // The backend's fp32 master weights and gradients (param_layout().buffer.total() elements each)
  // and the bf16 copy of the weights.
  float* params() { return b_.params; }
  float* grads() { return b_.grads; }
  BF16* params16() { return b_.params16; }
  // The fp32 gradient of one tensor (the tied wte's copies are summed across stages).
  float* grad(const std::string& name) const { return g32(name); }

  // GPT-2 initialization, the same values as model::Gpt::init (init_params on the host, then
  // uploaded).
  void init(uint64_t seed);
  // Host <-> backend copies of the master weights, in param_layout()'s order (total() elements);
  // set_params also refreshes the bf16 copy.
  void set_params(std::span<const float> host);
  void get_params(std::span<float> host) const;
  void get_grads(std::span<float> host) const;

  void zero_grad();
  // tokens, targets: [B,T] host arrays, B <= max_batch(), T <= max_seq(); a target < 0 is ignored.
  // Returns the mean loss over the non-ignored targets on the last stage, 0 on the others (whose
  // output is then stage_output(slot)); a stage without the embedding reads stage_input(slot)
  // and may get null tokens. `grad_scale` is the scale of the backward() that may follow (1/k to
  // average over k accumulated microbatches): the fused cross-entropy writes
  // d(grad_scale * mean loss)/d(logits) here. tokens must stay valid until that backward (the
  // embedding's gradient is planned from them on the host).
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                float grad_scale = 1.0f, int slot = 0);
  // Back-propagates the slot's forward: grads += grad_scale * d(mean loss)/d(params). A stage
  // without the head starts from output_grad(slot) (already scaled; the backward consumes it); one
  // without the embedding leaves the gradient of its input in input_grad().
  void backward(int slot = 0);

  // The stage boundary, bf16 [B*T, C] each, in the backend's memory.
  Act* stage_input(int slot) { return slots_.at(slot).layers.front().x; }
  const Act* stage_output(int slot) const { return slots_.at(slot).x_out; }
  Act* output_grad(int slot) { return slots_.at(slot).d_out; }
  // Valid after backward() until the next backward() of any slot.
  const Act* input_grad() const { return input_grad_; }

 private:
  // The buffers, listed once for the constructor and the memory model (mixed_layout.h).
  using Layer = MixedLayer;
  // One microbatch's activations, and its last forward.
  struct Slot : MixedSlot {
    const int32_t* tokens_host = nullptr;
    int B = 0, T = 0;
    bool backward_due = false;
  };
  struct Weights {  // one layer's bf16 weights, and its fp32 gradients
    const Act *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b,
        *mlp_w, *mlp_b;
    float *d_ln1_w, *d_ln1_b, *d_qkv_w, *d_qkv_b, *d_proj_w, *d_proj_b, *d_ln2_w, *d_ln2_b, *d_fc_w,
        *d_fc_b, *d_mlp_w, *d_mlp_b;
  };
  // Layer l's pointers (a global layer index of this stage), found by name once, at construction:
  // a step looks no name up.
  const Weights& layer_weights(int l) const { return weights_.at(l - stage_.first_layer); }
  // The forward of the stage's layer i from a.x up to fc_gelu (all its backward reads); the MLP
  // projection and the next residual add are left to the caller.
  void layer_forward(int i, const Layer& a, int B, int T);
  int64_t offset(const std::string& name) const { return layout_.buffer.at(name).offset; }
  const Act* w16(const std::string& name) const {
    return reinterpret_cast<const Act*>(b_.params16 + offset(name));
  }
  float* g32(const std::string& name) const { return b_.grads + offset(name); }
  // x[n] (bf16, this rank's partial sum) = the sum over the tp group, added in fp32.
  void sum_over_tp(Act* x, int64_t n);

  kernels::Backend& backend_;
  GptConfig cfg_;
  int B_, T_;
  StageSpec stage_;
  Recompute recompute_;
  comm::Communicator* tp_;
  int t_ = 1, r_ = 0;  // tp size and rank
  ParamLayout layout_;
  MixedBuffers b_;
  std::vector<Weights> weights_;  // the stage's layers, in order
  std::vector<Slot> slots_;
  std::vector<float> losses_host_;
  const Act* input_grad_ = nullptr;
};

}  // namespace weft::model
