#pragma once
// What a model stage tells whoever manages its parameters and gradients (ZeRO,
// runtime/distributed_optimizer.h) about its use of them, unit by unit (ParamUnit: a layer, the
// word or position embedding, the final LayerNorm). Without hooks every parameter is always
// resident and gradients simply accumulate.

namespace weft::model {

class ParamHooks {
 public:
  virtual ~ParamHooks() = default;
  // Before the unit's parameters are read (forward, recomputation, backward); calls may repeat.
  virtual void gather(int unit) = 0;
  // The pass no longer reads the unit's parameters (until its next gather).
  virtual void release(int unit) = 0;
  // The backward (or, with deferred weight gradients, the weight-gradient) pass has added all of
  // its contribution to the unit's gradients.
  virtual void grads_ready(int unit) = 0;
  // That pass has returned: every grads_ready of it has been called.
  virtual void backward_done() = 0;
};

}  // namespace weft::model
