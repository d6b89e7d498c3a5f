#pragma once
// What a model stage tells whoever manages its parameters and gradients (ZeRO,
// optim/distributed_optimizer.h) about its use of them, unit by unit (ParamUnit: a layer, the
// word or position embedding, the final LayerNorm), and where the hooks keep each unit. Without
// hooks every parameter and gradient lives in the model's own buffers, always resident, and
// gradients simply accumulate there.
//
// A unit's memory is addressed by its base: the address of the unit's element ParamUnit::begin,
// so its slice s sits at base + (offset(s) - begin), as in the model's buffers. The hooks may
// return the model's buffer (base = buffer + begin) or memory of their own (ZeRO-2/3 keep the
// units in use in a pool: optim/unit_pool.h).

namespace weft::model {

class ParamHooks {
 public:
  virtual ~ParamHooks() = default;
  // Before the unit's parameters are read (forward, recomputation, backward); calls may repeat.
  // Returns the unit's base of the weights the forward reads (the backend's activation type: fp32
  // under FP32, the bf16 copy under BF16Mixed), valid until release(unit).
  virtual const void* gather(int unit) = 0;
  // The pass no longer reads the unit's parameters (until its next gather).
  virtual void release(int unit) = 0;
  // Before a pass adds to the unit's gradients (calls may repeat): the unit's gradient base, which
  // the pass accumulates into. Valid until the unit's grads_ready; afterwards the next call may
  // return other memory (zeroed, or holding the earlier passes' sum: the hooks' choice).
  virtual float* grads(int unit) = 0;
  // The backward (or, with deferred weight gradients, the weight-gradient) pass has added all of
  // its contribution to the unit's gradients.
  virtual void grads_ready(int unit) = 0;
  // That pass has returned: every grads_ready of it has been called.
  virtual void backward_done() = 0;
};

}  // namespace weft::model
