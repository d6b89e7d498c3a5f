#pragma once
// Hugging Face GPT-2 (transformers' GPT2LMHeadModel) <-> weft's serial GPT-2 parameters (a model
// with every GPT-2 choice: hf.h's hf_architecture).
//
//   weft (model/param_layout.h)          Hugging Face                            conversion
//   wte            [Vp, C]               transformer.wte.weight        [V, C]    the first V rows
//   wpe            [S, C]                transformer.wpe.weight        [S, C]
//   h.i.ln_1.weight, .bias  [C]          transformer.h.i.ln_1.weight, .bias
//   h.i.attn.qkv.weight  [3C, C]         transformer.h.i.attn.c_attn.weight  [C, 3C]  transposed
//   h.i.attn.qkv.bias    [3C]            transformer.h.i.attn.c_attn.bias    [3C]
//   h.i.attn.proj.weight [C, C]          transformer.h.i.attn.c_proj.weight  [C, C]   transposed
//   h.i.attn.proj.bias   [C]             transformer.h.i.attn.c_proj.bias
//   h.i.ln_2.weight, .bias               transformer.h.i.ln_2.weight, .bias
//   h.i.mlp.fc.weight    [4C, C]         transformer.h.i.mlp.c_fc.weight     [C, 4C]  transposed
//   h.i.mlp.fc.bias      [4C]            transformer.h.i.mlp.c_fc.bias
//   h.i.mlp.proj.weight  [C, 4C]         transformer.h.i.mlp.c_proj.weight   [4C, C]  transposed
//   h.i.mlp.proj.bias    [C]             transformer.h.i.mlp.c_proj.bias
//   ln_f.weight, .bias                   transformer.ln_f.weight, .bias
//
// weft's linear weights are [out, in] (torch.nn.Linear); GPT-2's Conv1D stores [in, out], hence the
// transposes. Both split c_attn's output into q, k, v of C columns each, heads contiguous within.
// The LM head is tied to wte (no lm_head.weight). The vocabulary padding rows of wte (Vp - V) are
// not exported and are zero after an import (they are zero in a trained model too: padded logits
// are outside the softmax, so those rows get no gradient).
//
// An import reads model.safetensors with or without the "transformer." prefix (GPT2LMHeadModel's
// and GPT2Model's naming), in F32, F16 or BF16, and ignores the attention-mask buffers attn.bias
// and attn.masked_bias that old exports carry.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "weft/checkpoint/hf.h"

namespace weft::checkpoint {

// The Hugging Face name of weft parameter `name` ("h.3.attn.qkv.weight" ->
// "transformer.h.3.attn.c_attn.weight"), and whether its matrix is stored transposed there (the
// shape is left empty).
HfPart hf_gpt2_name(std::string_view weft_name);

// transformers' GPT2Config for cfg (config.json). bos/eos are `eot_id`, the tokenizer's
// <|endoftext|> (hf_tokenizer_eot), when the model has a tokenizer; absent without one, so that
// config.json never names an id outside the vocabulary.
nlohmann::ordered_json hf_gpt2_config(const model::GptConfig& cfg, std::optional<int> eot_id);

// The model config of an HF GPT2Config (config.json), checked to be a model weft computes exactly
// (tanh GELU, LayerNorm eps 1e-5, tied embeddings, the inner size 4C, ...); every problem at once,
// naming `origin`. `name` and `pad_vocab_to` are weft's own and are not in the HF config.
Result<model::GptConfig> gpt_config_from_hf(const nlohmann::json& hf, std::string_view origin,
                                            const std::string& name, int pad_vocab_to);

// write_hf_dir() with this architecture's tensors and config.json; a model of another is refused.
Status write_hf_gpt2(const std::string& out_dir, const model::GptConfig& cfg,
                     const FlatBuffer& params, std::optional<int> eot_id,
                     const std::map<std::string, std::string>& metadata = {});

// An HF GPT-2 directory (config.json + model.safetensors) as weft's serial parameters.
Result<HfModel> read_hf_gpt2(const std::string& in_dir, const HfImportOptions& options = {});

}  // namespace weft::checkpoint
