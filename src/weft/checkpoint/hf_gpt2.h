#pragma once
// Hugging Face GPT-2 (transformers' GPT2LMHeadModel) <-> weft's serial GPT-2 parameters.
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

#include <nlohmann/json.hpp>

#include "weft/core/status.h"
#include "weft/model/gpt_config.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::checkpoint {

inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfConfigFile = "config.json";

// The Hugging Face name of weft parameter `name` ("h.3.attn.qkv.weight" ->
// "transformer.h.3.attn.c_attn.weight"), and whether its matrix is stored transposed there.
struct HfName {
  std::string name;
  bool transposed = false;
};
HfName hf_gpt2_name(std::string_view weft_name);

// transformers' GPT2Config for cfg (config.json). bos/eos are `eot_id`, the tokenizer's
// <|endoftext|> (hf_tokenizer_eot), when the model has a tokenizer; absent without one, so that
// config.json never names an id outside the vocabulary.
nlohmann::ordered_json hf_gpt2_config(const model::GptConfig& cfg, std::optional<int> eot_id);

// The id of <|endoftext|> in a byte-level BPE tokenizer directory (encoder.json + vocab.bpe:
// GPT-2's, or one `weft tokenizer train` wrote).
Result<int> hf_tokenizer_eot(const std::string& tokenizer_dir);

// The tokenizer as transformers' GPT2Tokenizer reads it: OUT/vocab.json (encoder.json: the same
// map), OUT/merges.txt (vocab.bpe: the same "#version: 0.2" header and merges) and
// OUT/tokenizer_config.json + special_tokens_map.json (<|endoftext|> as bos, eos and unk;
// model_max_length n_ctx).
Status write_hf_tokenizer(const std::string& out_dir, const std::string& tokenizer_dir, int n_ctx);

// The model config of an HF GPT2Config (config.json), checked to be a model weft computes exactly
// (tanh GELU, LayerNorm eps 1e-5, tied embeddings, the inner size 4C, ...); every problem at once,
// naming `origin`. `name` and `pad_vocab_to` are weft's own and are not in the HF config.
Result<model::GptConfig> gpt_config_from_hf(const nlohmann::json& hf, std::string_view origin,
                                            const std::string& name, int pad_vocab_to);

// Writes OUT/model.safetensors (F32) and OUT/config.json for serial parameters `params` of `cfg`
// (layout model::gpt_param_layout(cfg)), creating OUT. `metadata` goes into the safetensors
// header next to {"format": "pt"}.
Status write_hf_gpt2(const std::string& out_dir, const model::GptConfig& cfg,
                     const FlatBuffer& params, std::optional<int> eot_id,
                     const std::map<std::string, std::string>& metadata = {});

struct HfImportOptions {
  std::string name;      // the model's name in weft; "": the safetensors metadata's, else IN's
  int pad_vocab_to = 0;  // 0: the safetensors metadata's (an export by weft), else 128
};

// An HF GPT-2 directory (config.json + model.safetensors) as weft's serial parameters.
struct HfModel {
  model::GptConfig config;
  FlatBuffer params;                            // layout model::gpt_param_layout(config)
  std::map<std::string, std::string> metadata;  // the safetensors header's __metadata__
};
Result<HfModel> read_hf_gpt2(const std::string& in_dir, const HfImportOptions& options = {});

// `weft ckpt export-hf`: the parameters of the weft checkpoint at `checkpoint` (a step directory
// or a root holding `latest`), checksums verified, written as write_hf_gpt2() does, with the
// tokenizer of `tokenizer_dir` (write_hf_tokenizer; "" for a model trained on ids alone).
Status export_hf_gpt2(const std::string& checkpoint, const std::string& out_dir,
                      const std::string& tokenizer_dir = "");
// `weft ckpt import-hf`: read_hf_gpt2(in_dir) saved as a weights-only weft checkpoint (step 0)
// under `out_root`. The tokenizer recorded is `tokenizer` when not empty, else "gpt2" for GPT-2's
// 50257-token vocabulary and "none" otherwise. Returns the checkpoint directory.
Result<std::string> import_hf_gpt2(const std::string& in_dir, const std::string& out_root,
                                   const HfImportOptions& options = {},
                                   const std::string& tokenizer = "");

}  // namespace weft::checkpoint
