#pragma once
// Where a GPT's activations live, per recomputation mode: one BufferLayout that the model allocates
// and that the memory prediction sums. Saying it once keeps predicted and allocated memory equal.
//
// Per layer l (rows = B*T):         stored under "h.l.<name>" when kept for backward, else under
//   ln_1 [B,T,C], ln_1.mean [B,T], ln_1.rstd [B,T],        "layer.<name>" (one layer's scratch).
//   qkv [B,T,3C], att [B,NH,T,T], atty [B,T,C], res_attn [B,T,C],
//   ln_2 [B,T,C], ln_2.mean [B,T], ln_2.rstd [B,T], fc [B,T,4C], fc_gelu [B,T,4C], out [B,T,C]
// none:      everything per layer.  selective: att in scratch (recomputed from qkv in backward).
// full:      only h.l.out per layer (the next layer's input); the rest in scratch.
// Top level: embed [B,T,C] (layer 0's input), ln_f [B,T,C], ln_f.mean, ln_f.rstd [B,T],
//            logits [B,T,Vp] (overwritten by their gradient in backward), losses [B,T].
//
// Tensor parallelism of size t (Megatron-LM): qkv [B,T,3C/t], att [B,NH/t,T,T], atty [B,T,C/t],
// fc and fc_gelu [B,T,4C/t], logits [B,T,Vp/t]. Sequence parallelism (Korthikanti et al. 2022)
// also splits the residual stream's B*T rows across the t ranks: embed, res_attn, out, and the
// LayerNorm statistics hold N/t rows; the LayerNorm outputs ln_1, ln_2, ln_f are kept gathered
// (N rows: the column-parallel GEMMs' inputs, so backward needs no second all-gather), and two
// scratch tensors hold a LayerNorm's local rows before the all-gather (sp.ln [N/t,C]) and a
// row-parallel GEMM's partial sum before the reduce-scatter (sp.partial [B,T,C]). With t > 1 the
// vocabulary-parallel cross-entropy's statistics (kernels/vocab_parallel_ce.h): this rank's
// (ce.stats [B,T,3]) and every rank's, all-gathered (ce.all [t,B,T,3]).

#include <string>
#include <vector>

#include "weft/model/gpt_config.h"
#include "weft/model/param_layout.h"
#include "weft/model/recompute.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::model {

// The per-layer activation names, in the order above.
const std::vector<std::string>& layer_activation_names();

// True when `name` of a layer is kept per layer under `mode` (else it lives in scratch).
bool kept_per_layer(const std::string& name, Recompute mode);

// How tensor parallelism divides one rank's tensors (validate_tensor_parallel checks it).
struct TpShape {
  int tp = 1;
  bool sequence_parallel = false;
};

// One microbatch's activations of `stage` (param_layout.h): "embed" is the stage's input (the
// embedding's output on the first stage, the received activations on the others); the head's
// tensors only on the last stage; a stage that is not last also holds d.output [Ns,C], the
// gradient of its output (received from the next stage).
BufferLayout gpt_activation_layout(const GptConfig& cfg, int B, int T, Recompute mode,
                                   TpShape tp = {}, StageSpec stage = {});

// Gradients of activations for the layer being back-propagated (reused across layers):
// d.residual [B,T,C] (gradient of the residual stream; N/t rows with sequence parallelism),
// d.ln [B,T,C], d.atty [B,T,C/t], d.qkv [B,T,3C/t], d.fc [B,T,4C/t] (the MLP projection's input
// gradient, times gelu' in place: backend.h's linear_backward with gelu_pre);
// with sequence parallelism also d.gathered [B,T,C] (the all-gathered d.residual) and
// d.ln_local [N/t,C] (the reduce-scattered d.ln).
BufferLayout gpt_grad_workspace_layout(const GptConfig& cfg, int B, int T, TpShape tp = {});

}  // namespace weft::model
