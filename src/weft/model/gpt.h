#pragma once
// A GPT-2 model on one process: parameters and gradients in flat buffers, activations in the
// layout of activation_layout.h, forward keeping what backward needs, backward with optional
// recomputation: embedding, L pre-LN transformer blocks (layer_forward), then the head (final
// LayerNorm, logits through the tied embedding, cross-entropy).

#include <cstdint>

#include "weft/model/gpt_config.h"
#include "weft/model/param_layout.h"
#include "weft/model/recompute.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::model {

class Gpt {
 public:
  // Allocates for batches up to B x T (validated first; throws weft::Error listing every problem).
  Gpt(const GptConfig& cfg, int B, int T, Recompute recompute = Recompute::None);

  const GptConfig& config() const { return cfg_; }
  const ParamLayout& param_layout() const { return layout_; }
  Recompute recompute() const { return recompute_; }
  int max_batch() const { return B_; }
  int max_seq() const { return T_; }

  FlatBuffer& params() { return params_; }
  const FlatBuffer& params() const { return params_; }
  FlatBuffer& grads() { return grads_; }
  const FlatBuffer& grads() const { return grads_; }

  void init(uint64_t seed) { init_params(params_, layout_, seed); }
  void zero_grad() { grads_.zero(); }

  // tokens, targets: [B,T] with B <= max_batch(), T <= max_seq(); a target < 0 is ignored.
  // Returns the mean loss over the non-ignored targets. With targets == nullptr only logits are
  // computed (inference) and 0 is returned.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Back-propagates the last forward: grads += loss_scale * d(mean loss)/d(params).
  // Pass loss_scale = 1/k to average over k accumulated microbatches.
  void backward(float loss_scale = 1.0f);

  // [B,T,Vp] logits of the last forward (only valid before backward, which overwrites them).
  const float* logits() const { return acts_.ptr("logits"); }

 private:
  struct LayerActs;
  LayerActs layer_acts(int l);
  void layer_forward(int l, const float* in, const LayerActs& a, int B, int T);

  GptConfig cfg_;
  int B_, T_;
  Recompute recompute_;
  ParamLayout layout_;
  FlatBuffer params_, grads_, acts_, work_;
  // last forward
  const int32_t* tokens_ = nullptr;
  const int32_t* targets_ = nullptr;
  int last_B_ = 0, last_T_ = 0;
  int64_t valid_targets_ = 0;
};

}  // namespace weft::model
