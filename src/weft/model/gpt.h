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

#include <cstdint>

#include "weft/model/gpt_config.h"
#include "weft/model/param_layout.h"
#include "weft/model/recompute.h"
#include "weft/parallel/tp_ops.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::model {

class Gpt {
 public:
  // Allocates for batches up to B x T (validated first, including the split across tp: throws
  // weft::Error listing every problem).
  Gpt(const GptConfig& cfg, int B, int T, Recompute recompute = Recompute::None,
      parallel::TensorParallel tp = {});

  const GptConfig& config() const { return cfg_; }
  const ParamLayout& param_layout() const { return layout_; }
  Recompute recompute() const { return recompute_; }
  const parallel::TensorParallel& tensor_parallel() const { return tp_; }
  int max_batch() const { return B_; }
  int max_seq() const { return T_; }

  FlatBuffer& params() { return params_; }
  const FlatBuffer& params() const { return params_; }
  FlatBuffer& grads() { return grads_; }
  const FlatBuffer& grads() const { return grads_; }

  void init(uint64_t seed) { init_params(params_, layout_, seed); }
  void zero_grad() { grads_.zero(); }

  // tokens, targets: [B,T] with B <= max_batch(), T <= max_seq(); a target < 0 is ignored.
  // Every tp rank passes the same batch. Returns the mean loss over the non-ignored targets. With
  // targets == nullptr only logits are computed (inference) and 0 is returned.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Back-propagates the last forward: grads += loss_scale * d(mean loss)/d(params).
  // Pass loss_scale = 1/k to average over k accumulated microbatches.
  void backward(float loss_scale = 1.0f);

  // After the last backward of a step: with sequence parallelism each rank's LayerNorm gradients
  // cover only its rows, so they are summed over the tp group (once per step, as Megatron-LM's
  // allreduce_layernorm_grads). A no-op otherwise.
  void finish_grad_sync();
  // This rank's share of the squared global gradient norm: its shards, plus the tp-replicated
  // parameters on tp rank 0 only, so a sum over the tp group counts every element once.
  double grad_sum_squares() const;

  // [B,T,Vp/tp] logits of the last forward: this rank's vocabulary columns (only valid before
  // backward, which overwrites them).
  const float* logits() const { return acts_.ptr("logits"); }

 private:
  struct LayerActs;
  LayerActs layer_acts(int l);
  void layer_forward(int l, const float* in, const LayerActs& a, int B, int T);
  // The conjugate operators around the tensor-parallel regions (see gpt.cc).
  void layernorm_gathered(float* full, float* mean, float* rstd, const float* in, const float* w,
                          const float* b, int N);
  void reduce_partial(float* out, float* partial, int N);
  const float* gather_grad(float* d_res, int N);
  float* reduce_grad(float* d_partial, int N);

  GptConfig cfg_;
  int B_, T_;
  Recompute recompute_;
  parallel::TensorParallel tp_;
  bool sp_ = false;  // sequence parallelism in effect (tp > 1)
  ParamLayout layout_;
  FlatBuffer params_, grads_, acts_, work_;
  // last forward
  const int32_t* tokens_ = nullptr;
  const int32_t* targets_ = nullptr;
  int last_B_ = 0, last_T_ = 0;
  int64_t valid_targets_ = 0;
};

}  // namespace weft::model
