#include "weft/model/memory.h"

#include "weft/model/activation_layout.h"
#include "weft/model/param_layout.h"

namespace weft::model {

MemoryEstimate estimate_rank_memory(const GptConfig& cfg, int B, int T, Recompute mode, int threads,
                                    TpShape tp, const std::vector<ChunkMemory>& chunks,
                                    int microbatches, bool pipelined, bool deferred_weight_grads) {
  const int64_t f = sizeof(float), N = int64_t{B} * T, C = cfg.n_embd, t = tp.tp;
  const bool sp = tp.sequence_parallel && t > 1;
  const int64_t boundary = (sp ? N / t : N) * C;  // a stage's input or output, [Ns, C]
  MemoryEstimate m;
  for (const ChunkMemory& c : chunks) {
    const int64_t params = gpt_param_layout(cfg, tp.tp, 0, c.stage).buffer.total() * f;
    m.params += params;
    m.grads += params;
    m.optimizer += 2 * params;
    m.activations += c.slots * gpt_activation_layout(cfg, B, T, mode, tp, c.stage).total() * f;
    m.workspace += gpt_grad_workspace_layout(cfg, B, T, tp).total() * f;
    if (c.sends_grads) m.workspace += int64_t{microbatches} * boundary * f;
    if (deferred_weight_grads) {
      // dout of qkv [N,3C/t], attn.proj [N,C], mlp.fc [N,4C/t], mlp.proj [N,C] per layer, and
      // d(embed) [N,C] on the first stage, per slot.
      const int64_t layers = c.stage.end_layer(cfg) - c.stage.first_layer;
      const int64_t per_slot = layers * N * (7 * C / t + 2 * C) + (c.stage.embedding ? N * C : 0);
      m.workspace += c.slots * per_slot * f;
    }
  }
  if (pipelined && t > 1 && !sp) m.workspace += N / t * C * f;  // scatter/gather receive buffer
  m.workspace += int64_t{threads} * T * T * f;  // attention backward: a T x T block per thread
  return m;
}

MemoryEstimate estimate_training_memory(const GptConfig& cfg, int B, int T, Recompute mode,
                                        int threads, TpShape tp) {
  return estimate_rank_memory(cfg, B, T, mode, threads, tp, {ChunkMemory{}}, 1, false, false);
}

}  // namespace weft::model
