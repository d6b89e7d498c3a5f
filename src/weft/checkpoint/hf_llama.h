#pragma once
// Hugging Face Llama (transformers' LlamaForCausalLM, modeling_llama.py) <-> weft's serial
// parameters of a model with Llama's choices: rotary positions, RMSNorm, a SwiGLU MLP; any number
// of key/value heads, F, tied or untied embeddings, biases or none.
//
//   weft (model/param_layout.h)            Hugging Face, prefix model.layers.i.      rows of weft's
//   wte          [Vp, C]                   model.embed_tokens.weight    [V, C]        the first V
//   h.i.ln_1.weight    [C]                 input_layernorm.weight       [C]
//   h.i.attn.qkv.weight [(NH+2NKV)HS, C]   self_attn.q_proj.weight      [NH HS, C]    q
//                                          self_attn.k_proj.weight      [NKV HS, C]   k
//                                          self_attn.v_proj.weight      [NKV HS, C]   v
//   h.i.attn.qkv.bias                      self_attn.{q,k,v}_proj.bias  (attention_bias)
//   h.i.attn.proj.weight [C, C]            self_attn.o_proj.weight      [C, C]
//   h.i.attn.proj.bias   [C]               self_attn.o_proj.bias        (attention_bias)
//   h.i.ln_2.weight    [C]                 post_attention_layernorm.weight
//   h.i.mlp.fc.weight  [2F, C]             mlp.gate_proj.weight         [F, C]        gate
//                                          mlp.up_proj.weight           [F, C]        up
//   h.i.mlp.fc.bias    [2F]                mlp.{gate,up}_proj.bias      (mlp_bias)
//   h.i.mlp.proj.weight [C, F]             mlp.down_proj.weight         [C, F]
//   h.i.mlp.proj.bias  [C]                 mlp.down_proj.bias           (mlp_bias)
//   ln_f.weight        [C]                 model.norm.weight
//   lm_head            [Vp, C]             lm_head.weight               [V, C]        the first V
//                                          (absent when tie_word_embeddings: the head is wte)
//
// Both store linear weights [out, in] (torch.nn.Linear), so each HF tensor is a block of rows of a
// weft tensor, copied as is. Both rotate pairs (i, i + HS/2) of a head by t theta^(-2i/HS)
// (GPT-NeoX's rotate_half, modeling_llama.py's apply_rotary_pos_emb), so q_proj and k_proj need no
// permutation (Meta's original checkpoints rotate adjacent pairs; transformers' converter permutes
// those rows once, and its output is what this reads and writes). Query head j uses key/value
// head j / (NH/NKV) in both (repeat_kv). weft's one `bias` is HF's attention_bias and mlp_bias
// together; the vocabulary padding rows (Vp - V) are not exported and are zero after an import.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/checkpoint/hf.h"

namespace weft::checkpoint {

// The HF tensors weft parameter `weft_name` of `cfg` is made of, in its row order ("h.0.attn.qkv.
// weight" -> q_proj, k_proj, v_proj of layer 0). Throws for a name that is not a parameter of cfg.
std::vector<HfPart> hf_llama_parts(const model::GptConfig& cfg, std::string_view weft_name);

// transformers' LlamaConfig for cfg (config.json). bos/eos are `eot_id` when the model has a
// tokenizer; absent without one.
nlohmann::ordered_json hf_llama_config(const model::GptConfig& cfg, std::optional<int> eot_id);

// The model config of an HF LlamaConfig (config.json), checked to be a model weft computes
// exactly (silu, no rope_scaling, head_dim n_embd/n_head, attention_bias = mlp_bias, ...); every
// problem at once, naming `origin`. LlamaConfig's defaults stand for absent keys.
Result<model::GptConfig> llama_config_from_hf(const nlohmann::json& hf, std::string_view origin,
                                              const std::string& name, int pad_vocab_to);

// write_hf_dir() with this architecture's tensors and config.json; a model of another is refused.
Status write_hf_llama(const std::string& out_dir, const model::GptConfig& cfg,
                      const FlatBuffer& params, std::optional<int> eot_id,
                      const std::map<std::string, std::string>& metadata = {});

// An HF Llama directory (config.json + model.safetensors: F32, F16 or BF16) as weft's serial
// parameters.
Result<HfModel> read_hf_llama(const std::string& in_dir, const HfImportOptions& options = {});

}  // namespace weft::checkpoint
