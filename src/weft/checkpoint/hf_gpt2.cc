#include "weft/checkpoint/hf_gpt2.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

namespace weft::checkpoint {
using nlohmann::json;

namespace {

constexpr std::string_view kPrefix = "transformer.";

// Per-layer modules: weft's name, Hugging Face's, and whether HF stores the weight transposed
// (a Conv1D keeps weights [in, out]); each has a .weight and a .bias.
constexpr std::tuple<std::string_view, std::string_view, bool> kLayerModules[] = {
    {"ln_1", "ln_1", false}, {"attn.qkv", "attn.c_attn", true}, {"attn.proj", "attn.c_proj", true},
    {"ln_2", "ln_2", false}, {"mlp.fc", "mlp.c_fc", true},      {"mlp.proj", "mlp.c_proj", true}};

// One part per parameter: wte without its padding rows, the Conv1D weights transposed.
std::vector<HfPart> gpt2_parts(const model::GptConfig& cfg, const SliceSpec& sl) {
  HfPart part = hf_gpt2_name(sl.name);
  part.shape = part.transposed ? Shape{sl.shape[1], sl.shape[0]} : sl.shape;
  if (sl.name == "wte") part.shape = {cfg.vocab_size, sl.shape[1]};
  return {part};
}

}  // namespace

HfPart hf_gpt2_name(std::string_view weft_name) {
  const std::string prefix(kPrefix);
  if (weft_name == "wte" || weft_name == "wpe")
    return {prefix + std::string(weft_name) + ".weight", {}};
  if (weft_name == "ln_f.weight" || weft_name == "ln_f.bias")
    return {prefix + std::string(weft_name), {}};
  if (weft_name.starts_with("h.")) {
    const size_t dot = weft_name.find('.', 2);
    if (dot != std::string_view::npos) {
      const std::string_view layer = weft_name.substr(0, dot + 1),
                             suffix = weft_name.substr(dot + 1);
      const size_t last = suffix.rfind('.');
      const std::string_view module = suffix.substr(0, last),
                             param = suffix.substr(last == std::string_view::npos ? 0 : last + 1);
      for (const auto& [weft, hf, conv1d] : kLayerModules) {
        if (weft == module && (param == "weight" || param == "bias")) {
          return {prefix + std::string(layer) + std::string(hf) + "." + std::string(param),
                  {},
                  conv1d && param == "weight"};
        }
      }
    }
  }
  WEFT_FAIL("'", weft_name, "' is not a GPT-2 parameter");
}

nlohmann::ordered_json hf_gpt2_config(const model::GptConfig& cfg, std::optional<int> eot_id) {
  // transformers' GPT2Config keys (configuration_gpt2.py), in the order save_pretrained writes
  // them. weft trains without dropout, so the dropout rates are 0.
  nlohmann::ordered_json j = {
      {"activation_function", "gelu_new"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"attn_pdrop", 0.0},
  };
  if (eot_id) j["bos_token_id"] = *eot_id;
  j["embd_pdrop"] = 0.0;
  if (eot_id) j["eos_token_id"] = *eot_id;
  j["initializer_range"] = 0.02;
  j["layer_norm_epsilon"] = 1e-5;
  j["model_type"] = "gpt2";
  j["n_ctx"] = cfg.max_seq_len;
  j["n_embd"] = cfg.n_embd;
  j["n_head"] = cfg.n_head;
  j["n_inner"] = nullptr;
  j["n_layer"] = cfg.n_layer;
  j["n_positions"] = cfg.max_seq_len;
  j["reorder_and_upcast_attn"] = false;
  j["resid_pdrop"] = 0.0;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  j["vocab_size"] = cfg.vocab_size;
  return j;
}

Result<model::GptConfig> gpt_config_from_hf(const nlohmann::json& hf, std::string_view origin,
                                            const std::string& name, int pad_vocab_to) {
  if (!hf.is_object()) {
    return Status::error(fmt::format("{}: not a Hugging Face config (not a JSON object)", origin));
  }
  Status s;
  auto add = [&](const std::string& problem) { s.add(fmt::format("{}: {}", origin, problem)); };
  auto get_int = [&](const char* key, const char* fallback, int& out) {
    const char* found =
        hf.contains(key) ? key : (fallback && hf.contains(fallback) ? fallback : nullptr);
    if (found == nullptr) {
      add(fmt::format("{} is missing", key));
      return;
    }
    const json& v = hf[found];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 ||
        v.get<int64_t>() > std::numeric_limits<int>::max()) {
      add(fmt::format("{}={} must be a positive integer", found, v.dump()));
      return;
    }
    out = static_cast<int>(v.get<int64_t>());
  };
  // A key weft has no choice about: absent means transformers' default, which must be `want`.
  auto must_be = [&](const char* key, const json& want, const char* why) {
    if (hf.contains(key) && hf[key] != want) {
      add(fmt::format("{}={} is not supported: weft {} ({})", key, hf[key].dump(), why,
                      want.dump()));
    }
  };
  if (!hf.contains("model_type") || hf["model_type"] != "gpt2") {
    add(fmt::format("model_type is {}, not \"gpt2\"",
                    hf.contains("model_type") ? hf["model_type"].dump() : "missing"));
  }
  model::GptConfig c;
  c.name = name;
  c.pad_vocab_to = pad_vocab_to;
  get_int("vocab_size", nullptr, c.vocab_size);
  get_int("n_embd", nullptr, c.n_embd);
  get_int("n_layer", nullptr, c.n_layer);
  get_int("n_head", nullptr, c.n_head);
  get_int("n_positions", "n_ctx", c.max_seq_len);
  if (hf.contains("n_inner") && !hf["n_inner"].is_null() &&
      hf["n_inner"] != json(int64_t{4} * c.n_embd)) {
    add(fmt::format("n_inner={} is not supported: weft's MLP is 4 x n_embd = {}",
                    hf["n_inner"].dump(), int64_t{4} * c.n_embd));
  }
  if (hf.contains("activation_function")) {
    const json& a = hf["activation_function"];
    if (a != "gelu_new" && a != "gelu_pytorch_tanh" && a != "gelu_fast") {
      add(fmt::format(
          "activation_function={} is not supported: weft computes GELU's tanh approximation "
          "(gelu_new)",
          a.dump()));
    }
  }
  if (hf.contains("layer_norm_epsilon")) {
    const json& e = hf["layer_norm_epsilon"];
    if (!e.is_number() || std::abs(e.get<double>() - 1e-5) > 1e-12) {
      add(fmt::format("layer_norm_epsilon={} is not supported: weft's LayerNorm uses 1e-5",
                      e.dump()));
    }
  }
  must_be("tie_word_embeddings", true, "ties the LM head to wte");
  must_be("scale_attn_weights", true, "scales attention scores by 1/sqrt(head size)");
  must_be("scale_attn_by_inverse_layer_idx", false, "does not scale by the layer index");
  must_be("add_cross_attention", false, "has no cross-attention");
  if (!s.ok()) return s;
  Status v = model::validate(c);
  if (!v.ok()) return v.prefixed(std::string(origin));
  return c;
}

Status write_hf_gpt2(const std::string& out_dir, const model::GptConfig& cfg,
                     const FlatBuffer& params, std::optional<int> eot_id,
                     const std::map<std::string, std::string>& metadata) {
  return write_hf_dir(
      out_dir, cfg, params, HfArchitecture::Gpt2,
      [&](const SliceSpec& sl) { return gpt2_parts(cfg, sl); }, hf_gpt2_config(cfg, eot_id),
      metadata);
}

Result<HfModel> read_hf_gpt2(const std::string& in_dir, const HfImportOptions& options) {
  auto dir_or = open_hf_dir(in_dir, options, "gpt2");
  if (!dir_or.ok()) return dir_or.status();
  const HfDir& dir = dir_or.value();
  auto cfg = gpt_config_from_hf(dir.config, dir.config_path, dir.name, dir.pad_vocab_to);
  if (!cfg.ok()) return cfg.status();

  // The file's tensors under their "transformer." names, whether they carry the prefix or not.
  HfTensors file;
  file.stray = "a GPT-2 parameter";
  file.embedding = "wte's";
  file.head_differs = fmt::format(
      "{}: lm_head.weight differs from wte.weight; weft ties the LM head to the embedding",
      dir.weights_path);
  for (const auto& t : dir.reader.header().tensors) {
    std::string_view n = t.name;
    if (n.starts_with(kPrefix)) n.remove_prefix(kPrefix.size());
    // The attention-mask buffers of old exports: not parameters.
    if (n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias")) continue;
    // Some exports keep the tied head as its own tensor; weft can take it only if it is wte.
    if (n == "lm_head.weight") {
      file.tied_head = &t;
    } else if (!file.by_name.emplace(std::string(kPrefix) + std::string(n), &t).second) {
      file.problems.add(fmt::format("{}: tensor '{}' appears with and without the '{}' prefix",
                                    dir.weights_path, n, kPrefix));
    }
  }
  return read_hf_model(
      dir, cfg.value(), [&](const SliceSpec& sl) { return gpt2_parts(cfg.value(), sl); },
      std::move(file));
}

}  // namespace weft::checkpoint
