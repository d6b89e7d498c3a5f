#pragma once
// Hugging Face model directories (config.json + model.safetensors + tokenizer files) <-> weft
// checkpoints. A weft model is written as the transformers architecture that computes it exactly:
//   GPT2LMHeadModel   GPT-2's choices (learned positions, LayerNorm of eps 1e-5, a GeLU MLP of 4C,
//                     one key/value head per query head, tied embeddings, biases): hf_gpt2.h
//   LlamaForCausalLM  rotary positions, RMSNorm and a SwiGLU MLP, with any F, key/value heads,
//                     tying, biases (attention_bias = mlp_bias = bias) and epsilon: hf_llama.h
// Any other combination is refused, naming what each architecture cannot hold. An import reads
// config.json's model_type ("gpt2" or "llama").

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/checkpoint/safetensors.h"
#include "weft/core/status.h"
#include "weft/model/gpt_config.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::checkpoint {

inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfConfigFile = "config.json";

enum class HfArchitecture { Gpt2, Llama };
const char* hf_architecture_name(HfArchitecture a);  // "GPT2LMHeadModel", "LlamaForCausalLM"

// The architecture that holds `cfg`, or an error naming, for each, the choices it cannot hold.
Result<HfArchitecture> hf_architecture(const model::GptConfig& cfg);

struct HfImportOptions {
  std::string name;      // the model's name in weft; "": the safetensors metadata's, else IN's
  int pad_vocab_to = 0;  // 0: the safetensors metadata's (an export by weft), else 128
};

// An HF directory as weft's serial parameters.
struct HfModel {
  model::GptConfig config;
  FlatBuffer params;                            // layout model::gpt_param_layout(config)
  std::map<std::string, std::string> metadata;  // the safetensors header's __metadata__
};

// What every architecture's import starts from: IN/config.json parsed, IN/model.safetensors'
// header read and checked, and the model's weft name and vocabulary padding resolved (the
// options, else the export's metadata, else IN's directory name and GptConfig's 128).
struct HfDir {
  std::string config_path, weights_path;
  nlohmann::json config;
  SafetensorsReader reader;
  std::string name;
  int pad_vocab_to = 0;
};
Result<HfDir> open_hf_dir(const std::string& in_dir, const HfImportOptions& options,
                          const std::string& default_name);

// One Hugging Face tensor of a weft parameter: a block of its rows, in order, or (GPT-2's Conv1D
// weights, stored [in, out]) the whole parameter transposed.
struct HfPart {
  std::string name;
  Shape shape;  // in the HF file
  bool transposed = false;
};
// An architecture's HF tensors for each parameter of a serial layout (model::gpt_param_layout).
using HfPartsOf = std::function<std::vector<HfPart>(const SliceSpec&)>;

// What each architecture's writer shares: `cfg` is a model of architecture `want` and `params`
// its serial layout; then OUT/model.safetensors (F32, `metadata` and {"format": "pt"}) and
// OUT/config.json, creating OUT.
Status write_hf_dir(const std::string& out_dir, const model::GptConfig& cfg,
                    const FlatBuffer& params, HfArchitecture want, const HfPartsOf& parts,
                    const nlohmann::ordered_json& config,
                    const std::map<std::string, std::string>& metadata);

// IN/model.safetensors as each architecture's reader hands it over, and how its problems read.
struct HfTensors {
  Status problems;                                          // found while naming the tensors
  std::map<std::string, const SafetensorsTensor*> by_name;  // by HfPart::name; a stray: an error
  const SafetensorsTensor* tied_head = nullptr;  // a tied export's head: it must equal wte
  std::string stray;         // what a tensor no part names is not: "a GPT-2 parameter"
  std::string embedding;     // the tied head's shape "not <embedding> [V, C]"
  std::string head_differs;  // the error when the tied head is not wte
};
// The serial parameters of `cfg` read as `parts` of dir's tensors; every problem at once.
Result<HfModel> read_hf_model(const HfDir& dir, const model::GptConfig& cfg, const HfPartsOf& parts,
                              HfTensors tensors);

// Writes OUT/model.safetensors (F32) and OUT/config.json for serial parameters `params` of `cfg`
// as hf_architecture(cfg) (an error otherwise). `eot_id`: the tokenizer's <|endoftext|>, bos and
// eos in config.json.
Status write_hf(const std::string& out_dir, const model::GptConfig& cfg, const FlatBuffer& params,
                std::optional<int> eot_id, const std::map<std::string, std::string>& metadata = {});
// An HF directory of either architecture (config.json's model_type) as weft's parameters.
Result<HfModel> read_hf(const std::string& in_dir, const HfImportOptions& options = {});

// `weft ckpt export-hf`: the parameters of the weft checkpoint at `checkpoint` (a step directory
// or a root holding `latest`), checksums verified, written as write_hf() does, with the tokenizer
// of `tokenizer_dir` (write_hf_tokenizer; "" for a model trained on ids alone). Returns the
// architecture written.
Result<HfArchitecture> export_hf(const std::string& checkpoint, const std::string& out_dir,
                                 const std::string& tokenizer_dir = "");
// `weft ckpt import-hf`: read_hf(in_dir) saved as a weights-only weft checkpoint (step 0) under
// `out_root`. The tokenizer recorded is `tokenizer` when not empty, else "gpt2" for GPT-2's
// 50257-token vocabulary and "none" otherwise. Returns the checkpoint directory.
Result<std::string> import_hf(const std::string& in_dir, const std::string& out_root,
                              const HfImportOptions& options = {},
                              const std::string& tokenizer = "");

// The id of <|endoftext|> in a byte-level BPE tokenizer directory (encoder.json + vocab.bpe:
// GPT-2's, or one `weft tokenizer train` wrote).
Result<int> hf_tokenizer_eot(const std::string& tokenizer_dir);

// The tokenizer as transformers' GPT2Tokenizer reads it (for either architecture: transformers
// loads the class tokenizer_config.json names): OUT/vocab.json (encoder.json: the same map),
// OUT/merges.txt (vocab.bpe: the same "#version: 0.2" header and merges) and
// OUT/tokenizer_config.json + special_tokens_map.json (<|endoftext|> as bos, eos and unk;
// model_max_length n_ctx).
Status write_hf_tokenizer(const std::string& out_dir, const std::string& tokenizer_dir, int n_ctx);

}  // namespace weft::checkpoint
