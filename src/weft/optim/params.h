#pragma once
// The small interface between a model chunk and the optimizer that owns its parameters
// (optim/distributed_optimizer.h); model::Gpt implements it. As Megatron-Core's distributed
// optimizer maps its shards as ranges over the DDP wrapper's buffers and not over a model class,
// the optimizer sees a flat buffer of slices cut into units (optim/shards.h), where the model
// keeps its weights and gradients, and is told through ParamHooks when each unit is used.

#include <cstddef>
#include <cstdint>

#include "weft/core/dtype.h"
#include "weft/kernels/backend.h"
#include "weft/optim/shards.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::optim {

// How a chunk's parameter and gradient buffers are laid out and who holds them
// (DistributedOptimizer::storage).
struct ParamStorage {
  int64_t unit_align = BufferLayout::kAlignElems;  // see zero_unit_align
  // false: the model allocates no such buffer; its ParamHooks hold every unit's parameters (ZeRO-3:
  // the weights the forward reads) or gradients (ZeRO-2/3) while in use, and must be installed
  // before the first forward.
  bool model_params = true;
  bool model_grads = true;
  // BF16Mixed: whether the model also keeps the fp32 master weights its bf16 read copy is rounded
  // from (ZeRO 1-3 keep a shard of them in the optimizer instead). Under FP32 the weights the
  // forward reads are the master weights: model_params alone decides.
  bool master_params = true;
  // Whether backward() will defer weight gradients (a zb-h1 schedule): each slot's block for them
  // is then taken at construction (else at the first backward that defers), so a step allocates
  // nothing.
  bool deferred_weight_grads = false;
};

// A run of one parameter's gradient elements: a whole slice, or the part of it in a ZeRO shard.
struct GradPart {
  size_t slice = 0;  // index into the layout's buffer.slices()
  float* grad = nullptr;
  int64_t n = 0;
};

// What a model chunk tells whoever manages its parameters and gradients about its use of them,
// unit by unit (ParamUnit), and where the hooks keep each unit. Without hooks every parameter and
// gradient lives in the model's own buffers, always resident, and gradients simply accumulate
// there.
//
// A unit's memory is addressed by its base: the address of the unit's element ParamUnit::begin,
// so its slice s sits at base + (offset(s) - begin), as in the model's buffers. The hooks may
// return the model's buffer (base = buffer + begin) or memory of their own (ZeRO-2/3 keep the
// units in use in a pool: optim/unit_pool.h).
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

// The parameters of a model chunk as the optimizer that owns them drives them.
class Params {
 public:
  virtual ~Params() = default;
  // Where every buffer lives and every operation on one runs.
  virtual kernels::Backend& backend() const = 0;
  virtual const UnitLayout& param_layout() const = 0;
  // Whether AdamW decays slice `slice` (matrices and embeddings, not biases or LayerNorms).
  virtual bool weight_decay(size_t slice) const = 0;
  // The fp32 master weights and gradients in the backend's memory, at the layout's offsets; empty
  // when ParamStorage gave them to the optimizer.
  virtual FlatBuffer& params() = 0;
  virtual FlatBuffer& grads() = 0;
  // BF16Mixed: the bf16 copy of the weights the forward reads (the offsets of params()); null
  // under FP32. refresh_read_copy rounds params()[at, at + n) into it.
  virtual BF16* read_copy() const = 0;
  virtual void refresh_read_copy(int64_t at, int64_t n) = 0;
  // Initial values: all of params(); or elements [begin, begin + n) of slice `slice` into host
  // memory `out` (a ZeRO rank initializes only its parts). Each value depends only on the seed,
  // the parameter and its global index.
  virtual void init(uint64_t seed) = 0;
  virtual void init_part(size_t slice, uint64_t seed, int64_t begin, int64_t n,
                         float* out) const = 0;
  // Told about every use of parameters and gradients from now on (null: nobody).
  virtual void set_param_hooks(ParamHooks* hooks) = 0;
};

}  // namespace weft::optim
