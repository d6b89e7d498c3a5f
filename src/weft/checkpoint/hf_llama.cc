#include "weft/checkpoint/hf_llama.h"

#include <fmt/format.h>

#include <limits>
#include <map>
#include <vector>

#include "weft/core/check.h"

namespace weft::checkpoint {
using nlohmann::json;

namespace {

// A float config value as the shortest decimal that reads back as the same float (1e-05, not
// 9.99999974737875e-06), so that config.json shows what the user wrote and an import restores
// the bits.
double shortest(float v) { return std::stod(fmt::format("{}", v)); }

}  // namespace

std::vector<HfPart> hf_llama_parts(const model::GptConfig& cfg, std::string_view weft_name) {
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, F = cfg.ffn(), HS = cfg.head_size();
  const int64_t q = int64_t{cfg.n_head} * HS, kv = int64_t{cfg.kv_heads()} * HS;
  if (weft_name == "wte") return {{"model.embed_tokens.weight", {V, C}}};
  if (weft_name == "lm_head" && !cfg.tie_embeddings) return {{"lm_head.weight", {V, C}}};
  if (weft_name == "ln_f.weight") return {{"model.norm.weight", {C}}};
  if (weft_name.starts_with("h.")) {
    const size_t dot = weft_name.find('.', 2);
    const std::string layer(weft_name.substr(2, dot - 2));
    const std::string p = "model.layers." + layer + ".";
    const std::string_view suffix =
        dot == std::string_view::npos ? std::string_view{} : weft_name.substr(dot + 1);
    auto rows = [&](std::initializer_list<std::pair<const char*, int64_t>> parts, bool weight) {
      std::vector<HfPart> out;
      for (const auto& [name, n] : parts) {
        out.push_back({p + name + (weight ? ".weight" : ".bias"), weight ? Shape{n, C} : Shape{n}});
      }
      return out;
    };
    const std::initializer_list<std::pair<const char*, int64_t>> qkv = {
        {"self_attn.q_proj", q}, {"self_attn.k_proj", kv}, {"self_attn.v_proj", kv}};
    const std::initializer_list<std::pair<const char*, int64_t>> fc = {{"mlp.gate_proj", F},
                                                                       {"mlp.up_proj", F}};
    if (suffix == "ln_1.weight") return {{p + "input_layernorm.weight", {C}}};
    if (suffix == "ln_2.weight") return {{p + "post_attention_layernorm.weight", {C}}};
    if (suffix == "attn.qkv.weight") return rows(qkv, true);
    if (suffix == "mlp.fc.weight") return rows(fc, true);
    if (suffix == "attn.proj.weight") return {{p + "self_attn.o_proj.weight", {C, q}}};
    if (suffix == "mlp.proj.weight") return {{p + "mlp.down_proj.weight", {C, F}}};
    if (cfg.bias) {
      if (suffix == "attn.qkv.bias") return rows(qkv, false);
      if (suffix == "mlp.fc.bias") return rows(fc, false);
      if (suffix == "attn.proj.bias") return {{p + "self_attn.o_proj.bias", {C}}};
      if (suffix == "mlp.proj.bias") return {{p + "mlp.down_proj.bias", {C}}};
    }
  }
  WEFT_FAIL("'", weft_name, "' is not a parameter of Llama-shaped model '", cfg.name, "'");
}

nlohmann::ordered_json hf_llama_config(const model::GptConfig& cfg, std::optional<int> eot_id) {
  // transformers' LlamaConfig keys (configuration_llama.py), in the order save_pretrained writes
  // them. weft trains without dropout.
  nlohmann::ordered_json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"attention_bias", cfg.bias},
      {"attention_dropout", 0.0},
  };
  if (eot_id) j["bos_token_id"] = *eot_id;
  if (eot_id) j["eos_token_id"] = *eot_id;
  j["head_dim"] = cfg.head_size();
  j["hidden_act"] = "silu";
  j["hidden_size"] = cfg.n_embd;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = cfg.ffn();
  j["max_position_embeddings"] = cfg.max_seq_len;
  j["mlp_bias"] = cfg.bias;
  j["model_type"] = "llama";
  j["num_attention_heads"] = cfg.n_head;
  j["num_hidden_layers"] = cfg.n_layer;
  j["num_key_value_heads"] = cfg.kv_heads();
  j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = shortest(cfg.norm_eps);
  j["rope_scaling"] = nullptr;
  j["rope_theta"] = shortest(cfg.rope_theta);
  j["tie_word_embeddings"] = cfg.tie_embeddings;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  j["vocab_size"] = cfg.vocab_size;
  return j;
}

Result<model::GptConfig> llama_config_from_hf(const json& hf, std::string_view origin,
                                              const std::string& name, int pad_vocab_to) {
  if (!hf.is_object()) {
    return Status::error(fmt::format("{}: not a Hugging Face config (not a JSON object)", origin));
  }
  Status s;
  auto add = [&](const std::string& problem) { s.add(fmt::format("{}: {}", origin, problem)); };
  // An integer key, or `fallback` when absent (0: required).
  auto get_int = [&](const char* key, int fallback, int& out) {
    if (!hf.contains(key) || (fallback > 0 && hf[key].is_null())) {
      if (fallback == 0) add(fmt::format("{} is missing", key));
      out = fallback;
      return;
    }
    const json& v = hf[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 ||
        v.get<int64_t>() > std::numeric_limits<int>::max()) {
      add(fmt::format("{}={} must be a positive integer", key, v.dump()));
      return;
    }
    out = static_cast<int>(v.get<int64_t>());
  };
  auto get_number = [&](const char* key, double fallback) {
    if (!hf.contains(key)) return fallback;
    if (!hf[key].is_number() || !(hf[key].get<double>() > 0)) {
      add(fmt::format("{}={} must be a positive number", key, hf[key].dump()));
      return fallback;
    }
    return hf[key].get<double>();
  };
  auto get_bool = [&](const char* key, bool fallback) {
    if (!hf.contains(key)) return fallback;
    if (!hf[key].is_boolean()) {
      add(fmt::format("{}={} must be true or false", key, hf[key].dump()));
      return fallback;
    }
    return hf[key].get<bool>();
  };
  if (!hf.contains("model_type") || hf["model_type"] != "llama") {
    add(fmt::format("model_type is {}, not \"llama\"",
                    hf.contains("model_type") ? hf["model_type"].dump() : "missing"));
  }
  model::GptConfig c;
  c.name = name;
  c.pad_vocab_to = pad_vocab_to;
  c.position = model::Position::Rope;
  c.norm = model::NormKind::RMSNorm;
  c.mlp = model::MlpKind::SwiGLU;
  get_int("vocab_size", 0, c.vocab_size);
  get_int("hidden_size", 0, c.n_embd);
  get_int("num_hidden_layers", 0, c.n_layer);
  get_int("num_attention_heads", 0, c.n_head);
  get_int("intermediate_size", 0, c.ffn_hidden_size);
  get_int("max_position_embeddings", 0, c.max_seq_len);
  int kv = 0;
  get_int("num_key_value_heads", c.n_head, kv);
  // weft stores 0 for "as many as the query heads", as a config file would say it.
  c.n_kv_head = kv == c.n_head ? 0 : kv;
  // LlamaConfig's defaults: rms_norm_eps 1e-6, rope_theta 10000, untied, no biases.
  c.norm_eps = static_cast<float>(get_number("rms_norm_eps", 1e-6));
  c.rope_theta = static_cast<float>(get_number("rope_theta", 10000.0));
  c.tie_embeddings = get_bool("tie_word_embeddings", false);
  const bool attention_bias = get_bool("attention_bias", false);
  const bool mlp_bias = get_bool("mlp_bias", false);
  if (attention_bias != mlp_bias) {
    add(
        fmt::format("attention_bias={} with mlp_bias={} is not supported: weft's `bias` puts "
                    "biases in every linear layer or in none",
                    attention_bias, mlp_bias));
  }
  c.bias = attention_bias;
  if (hf.contains("hidden_act") && hf["hidden_act"] != "silu") {
    add(fmt::format("hidden_act={} is not supported: weft's SwiGLU gates with silu",
                    hf["hidden_act"].dump()));
  }
  if (hf.contains("rope_scaling") && !hf["rope_scaling"].is_null()) {
    add(
        fmt::format("rope_scaling={} is not supported: weft's RoPE has no scaling (Llama 3.1's "
                    "\"llama3\" scaling, YaRN, ...)",
                    hf["rope_scaling"].dump()));
  }
  if (hf.contains("head_dim") && !hf["head_dim"].is_null() && c.n_head > 0 &&
      hf["head_dim"] != json(c.n_embd / c.n_head)) {
    add(
        fmt::format("head_dim={} is not supported: weft's heads are hidden_size / "
                    "num_attention_heads = {} wide",
                    hf["head_dim"].dump(), c.n_embd / c.n_head));
  }
  if (hf.contains("pretraining_tp") && hf["pretraining_tp"] != 1) {
    add(
        fmt::format("pretraining_tp={} is not supported: weft computes the exact linears "
                    "(pretraining_tp 1)",
                    hf["pretraining_tp"].dump()));
  }
  if (!s.ok()) return s;
  Status v = model::validate(c);
  if (!v.ok()) return v.prefixed(std::string(origin));
  return c;
}

Status write_hf_llama(const std::string& out_dir, const model::GptConfig& cfg,
                      const FlatBuffer& params, std::optional<int> eot_id,
                      const std::map<std::string, std::string>& metadata) {
  // Every HF tensor is a block of rows of a weft tensor, in place: no copies.
  return write_hf_dir(
      out_dir, cfg, params, HfArchitecture::Llama,
      [&](const SliceSpec& sl) { return hf_llama_parts(cfg, sl.name); },
      hf_llama_config(cfg, eot_id), metadata);
}

Result<HfModel> read_hf_llama(const std::string& in_dir, const HfImportOptions& options) {
  auto dir_or = open_hf_dir(in_dir, options, "llama");
  if (!dir_or.ok()) return dir_or.status();
  const HfDir& dir = dir_or.value();
  auto cfg_or = llama_config_from_hf(dir.config, dir.config_path, dir.name, dir.pad_vocab_to);
  if (!cfg_or.ok()) return cfg_or.status();
  const model::GptConfig& cfg = cfg_or.value();

  HfTensors file;
  file.stray = fmt::format("a parameter of the Llama model {} describes", kHfConfigFile);
  file.embedding = "embed_tokens'";
  file.head_differs = fmt::format(
      "{}: lm_head.weight differs from model.embed_tokens.weight, but {} says "
      "tie_word_embeddings=true",
      dir.weights_path, kHfConfigFile);
  for (const auto& t : dir.reader.header().tensors) {
    // transformers' non-persistent rotary buffer, which old exports carry: not a parameter.
    if (t.name.ends_with(".self_attn.rotary_emb.inv_freq")) continue;
    // A tied export may still carry the head; weft takes it only if it is the embedding.
    if (cfg.tie_embeddings && t.name == "lm_head.weight") {
      file.tied_head = &t;
    } else {
      file.by_name.emplace(t.name, &t);
    }
  }
  return read_hf_model(
      dir, cfg, [&](const SliceSpec& sl) { return hf_llama_parts(cfg, sl.name); }, std::move(file));
}

}  // namespace weft::checkpoint
