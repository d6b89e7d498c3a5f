#pragma once
// Where a GPT stage's activations and workspace live, per recomputation mode and precision: the
// layouts model::Gpt allocates from its backend and the memory model (memory.h) sums. Saying it
// once keeps predicted and allocated memory equal (asserted to the byte on the host backends:
// tests/parallel/device_memory_test.cc).
//
// Two element types: the backend's activation type (kernels/backend.h, Act: fp32 under
// Precision::FP32, bf16 under BF16Mixed) for the tensors the GEMMs and kernels read and write,
// and fp32 for LayerNorm statistics, attention's saved state, losses and the cross-entropy's
// statistics. Each layout is one block of the backend's memory.
//
// Per microbatch slot (gpt_activation_layout), per layer l (rows = B*T), under "h.l.<name>"
// when kept for backward:
//   ln_1 [B,T,C], ln_1.mean [B,T], ln_1.rstd [B,T] (fp32),
//   qkv [B,T,QKV], att (fp32: the attention's saved state, attention_state_shape), atty [B,T,C],
//   res_attn [B,T,C], ln_2 [B,T,C], ln_2.mean [B,T], ln_2.rstd [B,T] (fp32), fc [B,T,FC],
//   fc_act [B,T,F] (gelu(fc), or SwiGLU's silu(gate) * up), out [B,T,C]
// with QKV = C + 2*NKV*HS (gpt_config.h: qkv_width), F the MLP's width (4C for GPT-2) and FC = F,
// or 2F for SwiGLU (fc_width). RMSNorm keeps no mean: no ln_*.mean tensors then.
// none:      everything per layer.  selective: att recomputed from qkv in the backward, where the
//            backend keeps the T x T probabilities (host fp32); where it keeps only lse (bf16:
//            flash attention) there is nothing to drop and selective is none.
// full:      only h.l.out per layer (the next layer's input); the rest recomputed.
// In every mode the last layer's out is kept only on the last stage (ln_f's input): elsewhere it
// is the stage's output, written to the pipeline's send buffer (runtime/pipeline_runner.h), and
// no backward reads it. So under full recomputation a slot holds one [Ns,C] tensor per layer,
// the layer's input (embed for the first), as Megatron-LM's (Korthikanti et al. 2022, §5).
// What is not kept lives once per model, in the workspace under "layer.<name>": a layer's
// forward writes it and is done with it, and recomputation refills it right before the layer's
// backward reads it, one slot at a time.
// Top level: embed [B,T,C] (layer 0's input), ln_f [B,T,C], ln_f.mean, ln_f.rstd [B,T] (fp32),
//            logits [B,T,Vp] (overwritten by their gradient in a forward with targets), losses
//            [B,T] (fp32).
//
// Tensor parallelism of size t (Megatron-LM): qkv [B,T,QKV/t], att per NH/t heads, atty
// [B,T,C/t], fc [B,T,FC/t] and fc_act [B,T,F/t], logits [B,T,Vp/t]. Sequence parallelism
// (Korthikanti et al. 2022) also splits the residual stream's B*T rows across the t ranks: embed,
// res_attn, out, and the LayerNorm statistics hold N/t rows; the LayerNorm outputs ln_1, ln_2, ln_f
// are kept gathered (N rows: the column-parallel GEMMs' inputs, so backward needs no second
// all-gather). With t > 1 the vocabulary-parallel cross-entropy's statistics
// (kernels/vocab_parallel_ce.h): this rank's (ce.stats [B,T,3]) and every rank's, all-gathered
// (ce.all [t,B,T,3]), fp32.

#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/dtype.h"
#include "weft/model/gpt_config.h"
#include "weft/model/param_layout.h"
#include "weft/model/recompute.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::model {

// The per-layer activation names, in the order above.
const std::vector<std::string>& layer_activation_names();
// Whether `name` is an fp32 tensor whatever the precision (statistics, attention's saved state).
bool is_fp32_activation(const std::string& name);

// Whether the model has the per-layer tensor `name` at all (RMSNorm: no means).
bool has_layer_activation(const GptConfig& cfg, const std::string& name);
// True when `name` of a layer is kept per layer under `mode` (else it lives in the workspace).
bool kept_per_layer(const std::string& name, Recompute mode, Precision precision = Precision::FP32);

// How tensor parallelism divides one rank's tensors (validate_tensor_parallel checks it).
struct TpShape {
  int tp = 1;
  bool sequence_parallel = false;
};

// Bytes of one activation element under `precision` (kernels::Backend::act_bytes).
inline int64_t act_bytes(Precision precision) { return precision == Precision::FP32 ? 4 : 2; }

// What a backend's attention keeps for its backward, per microbatch and rank ([B, NH/t, T, T]
// probabilities under FP32, the host fp32 kernels; [B, NH/t, T] logsumexps under BF16Mixed, the
// flash-style kernels: kernels::Backend::attention_saved_floats).
Shape attention_state_shape(int64_t B, int64_t T, int64_t heads, Precision precision);

// Bytes of one block of a backend's memory holding `bytes`: every backend hands memory out in
// 256-byte-aligned blocks and counts it so (kernels/backend.h, Backend::allocated_bytes).
inline int64_t backend_block_bytes(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// A set of tensors in two blocks: `act` in elements of the activation type, `f32` in floats.
struct ActivationLayout {
  BufferLayout act, f32;
  // What the two blocks take from a backend.
  int64_t bytes(Precision precision) const {
    return backend_block_bytes(act.total() * act_bytes(precision)) +
           backend_block_bytes(f32.total() * 4);
  }
};

// One microbatch's activations of `stage` (param_layout.h): "embed" is the stage's input (the
// embedding's output on the first stage, the received activations on the others); the head's
// tensors only on the last stage. Nothing that arrives for the backward: the gradient of the
// stage's output is written into the workspace's d.residual right before the backward that
// reads it (model::Gpt::output_grad).
ActivationLayout gpt_activation_layout(const GptConfig& cfg, int B, int T, Recompute mode,
                                       TpShape tp = {}, StageSpec stage = {},
                                       Precision precision = Precision::FP32);

// What the model needs once, whatever the slots:
//   act: the gradients of activations for the layer being back-propagated: d.residual [B,T,C]
//     (the residual stream's; N/t rows with sequence parallelism), d.ln [B,T,C], d.atty [B,T,C/t],
//     d.qkv [B,T,QKV/t], d.fc [B,T,FC/t] (the MLP projection's input gradient, times gelu' in
//     place: backend.h's linear_backward with gelu_pre), with SwiGLU d.fc_act [B,T,F/t] (the
//     projection's input gradient, before swiglu_backward); with sequence parallelism also
//     d.gathered [B,T,C] (the all-gathered d.residual), d.ln_local [N/t,C] (the reduce-scattered
//     d.ln), sp.ln [N/t,C] (a LayerNorm's local rows before the all-gather) and sp.partial
//     [B,T,C] (a row-parallel GEMM's partial sum before the reduce-scatter); the layer tensors
//     `mode` does not keep ("layer.<name>", see above);
//   f32: tokens and targets [B,T] (int32: the backend's copies), the not-kept fp32 layer tensors
//     (bf16 partial sums are reduced in bf16, in place: no fp32 copy); with sequence parallelism
//     ln.packed (this stage's LayerNorm gradients, packed for
//     their one all-reduce per step).
ActivationLayout gpt_workspace_layout(const GptConfig& cfg, int B, int T, Recompute mode,
                                      TpShape tp = {}, StageSpec stage = {},
                                      Precision precision = Precision::FP32);

// With deferred weight gradients (zb-h1), what one slot keeps from its I pass to its W pass, in
// activation elements: the output gradients of qkv [N,QKV/t], attn.proj [N,C], mlp.fc [N,FC/t] and
// mlp.proj [N,C] per layer, and d(embed) [N,C] on the first stage (the head's dlogits stay in the
// slot's logits).
int64_t deferred_grad_elements(const GptConfig& cfg, int B, int T, TpShape tp,
                               const StageSpec& stage);

}  // namespace weft::model
