#include "weft/model/memory.h"

#include <algorithm>

#include "weft/model/activation_layout.h"
#include "weft/model/param_layout.h"
#include "weft/tensor/zero_shards.h"

namespace weft::model {

namespace {

// The gradient reductions in flight (kZeroBucketsInFlight units at most, the largest counted):
// Open MPI's nonblocking collectives (libnbc) copy through temporaries, about `copies` times their
// input: once for an all-reduce, three times for a reduce-scatter (libnbc's reduce_scatter_block
// allocates two; the third is fitted: Open MPI 4.1 on this machine, bench/results/zero-*.md).
void comm_temporaries(MemoryEstimate& m, const ParamLayout& layout, int copies) {
  std::vector<int64_t> units;
  for (const ParamUnit& u : layout.units) units.push_back(u.numel() * int64_t{sizeof(float)});
  std::sort(units.rbegin(), units.rend());
  for (size_t i = 0; i < units.size() && i < size_t{kZeroBucketsInFlight}; ++i) {
    m.workspace += copies * units[i];
  }
}

// A chunk's parameters, gradients and optimizer state under ZeRO (see memory.h).
void add_model_state(MemoryEstimate& m, const ParamLayout& layout, const StageSpec& stage,
                     ZeroSharding zero) {
  const int64_t f = sizeof(float), P = layout.buffer.total() * f;
  if (zero.stage == 0) {
    m.params += P;
    m.grads += P;
    m.optimizer += 2 * P;
    if (zero.dp > 1) comm_temporaries(m, layout, 1);
    return;
  }
  constexpr int64_t kPage = 4096;
  int64_t S = 0, largest_shard = 0;
  std::vector<int64_t> resident;  // a unit's pages, when its gradient or parameters are whole
  int64_t wte = 0, wpe = 0, ln_f = 0, layer = 0;
  if (zero.dp > 1) comm_temporaries(m, layout, 3);
  for (const ParamUnit& u : layout.units) {
    const int64_t shard = zero_shard(u.numel(), zero.dp, 0).size() * f;
    S += shard;
    largest_shard = std::max(largest_shard, shard);
    const int64_t pages = (u.numel() * f + kPage - 1) / kPage * kPage;
    if (u.name == "wte") {
      wte = pages;
    } else if (u.name == "wpe") {
      wpe = pages;
    } else if (u.name == "ln_f") {
      ln_f = pages;
    } else {
      layer = std::max(layer, pages);
    }
    if (u.name != "wte" || !(stage.embedding && stage.head)) resident.push_back(pages);
  }
  m.optimizer += 2 * S;  // m, v
  if (zero.stage == 1) {
    m.params += P;
    m.grads += P + S;
    m.optimizer += S;  // master weights
    return;
  }
  std::sort(resident.rbegin(), resident.rend());
  int64_t grads = S + kZeroBucketsInFlight * largest_shard;
  for (size_t i = 0; i < resident.size() && i <= size_t{kZeroBucketsInFlight}; ++i) {
    grads += resident[i];
  }
  if (stage.embedding && stage.head) grads += wte;
  m.grads += grads;
  if (zero.stage == 2) {
    m.params += P;
    m.optimizer += S;
    return;
  }
  m.params += S + std::max({stage.embedding ? wte + wpe : 0, stage.head ? wte + ln_f : 0, layer});
}

}  // namespace

MemoryEstimate estimate_rank_memory(const GptConfig& cfg, int B, int T, Recompute mode, int threads,
                                    TpShape tp, const std::vector<ChunkMemory>& chunks,
                                    int microbatches, bool pipelined, bool deferred_weight_grads,
                                    ZeroSharding zero) {
  const int64_t f = sizeof(float), N = int64_t{B} * T, C = cfg.n_embd, t = tp.tp;
  const bool sp = tp.sequence_parallel && t > 1;
  const int64_t boundary = (sp ? N / t : N) * C;  // a stage's input or output, [Ns, C]
  MemoryEstimate m;
  for (const ChunkMemory& c : chunks) {
    add_model_state(m,
                    gpt_param_layout(cfg, tp.tp, 0, c.stage, zero_unit_align(zero.stage, zero.dp)),
                    c.stage, zero);
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
