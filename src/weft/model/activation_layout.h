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

#include <string>
#include <vector>

#include "weft/model/gpt_config.h"
#include "weft/model/recompute.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::model {

// The per-layer activation names, in the order above.
const std::vector<std::string>& layer_activation_names();

// True when `name` of a layer is kept per layer under `mode` (else it lives in scratch).
bool kept_per_layer(const std::string& name, Recompute mode);

BufferLayout gpt_activation_layout(const GptConfig& cfg, int B, int T, Recompute mode);

// Gradients of activations for the layer being back-propagated (reused across layers):
// d.residual [B,T,C] (gradient of the residual stream), d.ln [B,T,C], d.atty [B,T,C],
// d.qkv [B,T,3C], d.fc_gelu [B,T,4C], d.fc [B,T,4C].
BufferLayout gpt_grad_workspace_layout(const GptConfig& cfg, int B, int T);

}  // namespace weft::model
