#include "weft/model/memory.h"

#include "weft/model/activation_layout.h"
#include "weft/model/param_layout.h"

namespace weft::model {

MemoryEstimate estimate_training_memory(const GptConfig& cfg, int B, int T, Recompute mode,
                                        int threads, TpShape tp) {
  const int64_t f = sizeof(float);
  MemoryEstimate m;
  m.params = gpt_param_layout(cfg, tp.tp, 0).buffer.total() * f;
  m.grads = m.params;
  m.optimizer = 2 * m.params;
  m.activations = gpt_activation_layout(cfg, B, T, mode, tp).total() * f;
  // attention backward keeps a T x T row block per thread
  m.workspace = gpt_grad_workspace_layout(cfg, B, T, tp).total() * f + int64_t{threads} * T * T * f;
  return m;
}

}  // namespace weft::model
