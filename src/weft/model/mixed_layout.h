#pragma once
// Every buffer model::MixedGpt (mixed_gpt.h) allocates on its backend, listed once: the
// constructor walks this list with an allocator, and the memory model (memory.h,
// estimate_rank_memory under Precision::BF16Mixed) walks the same list with a counter, so what the
// planner and the device trainer's arena are told is exactly what the model allocates (asserted
// per layout on the host-bf16 backend: tests/parallel/device_memory_test.cc). Pure: no backend,
// no kernels; the planner links it through model_config.

#include <cstdint>
#include <vector>

#include "weft/core/dtype.h"
#include "weft/model/gpt_config.h"
#include "weft/model/param_layout.h"
#include "weft/model/recompute.h"

namespace weft::kernels {
struct Act;  // kernels/backend.h: an activation element (bf16 here)
}  // namespace weft::kernels

namespace weft::model {

using kernels::Act;

// What a buffer is for, in the MemoryEstimate's terms (memory.h).
enum class BufferKind { Params, Grads, Activations, Workspace };

// Pointers to one layer's activations (bf16 unless noted).
struct MixedLayer {
  Act *x, *ln1, *qkv, *atty, *res_attn, *ln2, *fc_pre, *fc_gelu;
  float *ln1_mean, *ln1_rstd, *lse, *ln2_mean, *ln2_rstd;  // fp32
};

// One microbatch's activations.
struct MixedSlot {
  std::vector<MixedLayer> layers;  // the stage's
  Act* x_out = nullptr;            // [N,C] the stage's output: x_L on the last stage
  Act* lnf = nullptr;              // [N,C], the head's
  float *lnf_mean = nullptr, *lnf_rstd = nullptr;
  Act* logits = nullptr;    // [N,Vp/tp], overwritten by its gradient in the forward
  float* losses = nullptr;  // [N]
  Act* d_out = nullptr;     // [N,C] the output's gradient, stages without the head
};

// The model's buffers outside the slots.
struct MixedBuffers {
  float* params = nullptr;                        // fp32 master weights
  BF16* params16 = nullptr;                       // the bf16 copy the forward reads, same offsets
  float* grads = nullptr;                         // fp32
  Act *scratch, *d_res, *d_ln, *d_atty, *d_wide;  // [N,C] x 3, [N,C/tp], [N,4C/tp]
  int32_t *tokens, *targets;                      // backend copies, [B*T]
  float* sum = nullptr;     // tp > 1: [N,C] fp32, a partial sum being all-reduced
  float* ce = nullptr;      // tp > 1: [N,3] this rank's cross-entropy statistics
  float* ce_all = nullptr;  // tp > 1: [tp,N,3] every rank's
};

// Walks every buffer of a MixedGpt stage of `param_count` parameters per tensor-parallel rank
// (param_layout's buffer.total()), for microbatches up to B x T, with `slots.size()` slots in
// flight, in the order the constructor allocates them: s.take<T>(count, kind) returns the buffer
// (or null when only counting). `Slot` is MixedSlot or a type derived from it.
template <typename Sink, typename Slot>
void lay_out_mixed(Sink& s, const GptConfig& cfg, int64_t param_count, int B, int T,
                   const StageSpec& stage, Recompute recompute, int tp, MixedBuffers& b,
                   std::vector<Slot>& slots) {
  // This rank's widths: C and the vocabulary are whole in the replicated tensors, Cl = C/tp wide
  // in the column-parallel ones (qkv, attention, fc), the logits Vp/tp.
  const int64_t N = int64_t{B} * T, C = cfg.n_embd, Cl = C / tp, NHl = cfg.n_head / tp;
  const int64_t Vl = cfg.padded_vocab() / tp;
  b.params = s.template take<float>(param_count, BufferKind::Params);
  b.params16 = s.template take<BF16>(param_count, BufferKind::Params);
  b.grads = s.template take<float>(param_count, BufferKind::Grads);
  const BufferKind a = BufferKind::Activations, w = BufferKind::Workspace;
  auto act = [&](int64_t n, BufferKind k) {
    return reinterpret_cast<Act*>(s.template take<BF16>(n, k));
  };
  // A layer's tensors after its input x: per layer and slot, or (full recomputation) one set that
  // every layer of every slot shares, recomputed before each layer's backward. Selective
  // recomputation keeps everything (flash attention has no T x T matrix to drop: mixed_gpt.h).
  auto take_layer = [&](MixedLayer& l, BufferKind k) {
    l.ln1 = act(N * C, k);
    l.ln1_mean = s.template take<float>(N, k);
    l.ln1_rstd = s.template take<float>(N, k);
    l.qkv = act(N * 3 * Cl, k);
    l.atty = act(N * Cl, k);
    l.lse = s.template take<float>(NHl * N, k);
    l.res_attn = act(N * C, k);
    l.ln2 = act(N * C, k);
    l.ln2_mean = s.template take<float>(N, k);
    l.ln2_rstd = s.template take<float>(N, k);
    l.fc_pre = act(N * 4 * Cl, k);
    l.fc_gelu = act(N * 4 * Cl, k);
  };
  const bool full = recompute == Recompute::Full;
  MixedLayer shared{};
  if (full) take_layer(shared, w);
  for (Slot& slot : slots) {
    slot.layers.resize(stage.end_layer(cfg) - stage.first_layer);
    for (MixedLayer& l : slot.layers) {
      if (full) {
        l = shared;
      } else {
        take_layer(l, a);
      }
      l.x = act(N * C, a);
    }
    slot.x_out = act(N * C, a);
    if (stage.head) {
      slot.lnf = act(N * C, a);
      slot.lnf_mean = s.template take<float>(N, a);
      slot.lnf_rstd = s.template take<float>(N, a);
      slot.logits = act(N * Vl, a);
      slot.losses = s.template take<float>(N, a);
    } else {
      slot.d_out = act(N * C, a);
    }
  }
  b.scratch = act(N * C, w);
  b.d_res = act(N * C, w);
  b.d_ln = act(N * C, w);
  b.d_atty = act(N * Cl, w);
  b.d_wide = act(N * 4 * Cl, w);
  b.tokens = s.template take<int32_t>(N, w);
  b.targets = s.template take<int32_t>(N, w);
  if (tp > 1) {
    b.sum = s.template take<float>(N * C, w);
    b.ce = s.template take<float>(N * 3, w);
    b.ce_all = s.template take<float>(tp * N * 3, w);
  }
}

}  // namespace weft::model
