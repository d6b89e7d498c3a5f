#include "weft/checkpoint/hf_gpt2.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "weft/checkpoint/checkpoint.h"
#include "weft/checkpoint/safetensors.h"
#include "weft/core/pending_file.h"
#include "weft/core/text_file.h"
#include "weft/model/param_layout.h"

namespace weft::checkpoint {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kPrefix = "transformer.";
constexpr int kGpt2Vocab = 50257;  // GPT-2's tokenizer; <|endoftext|> is its last id
constexpr const char* kEndOfText = "<|endoftext|>";  // the one special token of byte-level BPE

// Per-layer names: weft suffix, Hugging Face suffix, whether HF stores the matrix transposed
// (Conv1D keeps weights [in, out]).
struct LayerName {
  std::string_view weft, hf;
  bool transposed;
};
constexpr LayerName kLayerNames[] = {
    {"ln_1.weight", "ln_1.weight", false},
    {"ln_1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true},
    {"attn.qkv.bias", "attn.c_attn.bias", false},
    {"attn.proj.weight", "attn.c_proj.weight", true},
    {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln_2.weight", "ln_2.weight", false},
    {"ln_2.bias", "ln_2.bias", false},
    {"mlp.fc.weight", "mlp.c_fc.weight", true},
    {"mlp.fc.bias", "mlp.c_fc.bias", false},
    {"mlp.proj.weight", "mlp.c_proj.weight", true},
    {"mlp.proj.bias", "mlp.c_proj.bias", false},
};

// [R, K] -> [K, R].
void transpose(const float* in, int64_t R, int64_t K, float* out) {
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t k = 0; k < K; ++k) out[k * R + r] = in[r * K + k];
  }
}

// The shape a weft parameter has in the HF file.
Shape hf_shape(const model::GptConfig& cfg, const std::string& weft_name, const Shape& shape,
               bool transposed) {
  if (weft_name == "wte") return {cfg.vocab_size, shape[1]};
  if (transposed) return {shape[1], shape[0]};
  return shape;
}

// An attention-mask buffer of old HF exports: not a parameter.
bool is_mask_buffer(std::string_view name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

}  // namespace

HfName hf_gpt2_name(std::string_view weft_name) {
  const std::string prefix(kPrefix);
  if (weft_name == "wte" || weft_name == "wpe")
    return {prefix + std::string(weft_name) + ".weight"};
  if (weft_name == "ln_f.weight" || weft_name == "ln_f.bias")
    return {prefix + std::string(weft_name)};
  if (weft_name.starts_with("h.")) {
    const size_t dot = weft_name.find('.', 2);
    if (dot != std::string_view::npos) {
      const std::string_view layer = weft_name.substr(0, dot + 1),
                             suffix = weft_name.substr(dot + 1);
      for (const auto& n : kLayerNames) {
        if (n.weft == suffix) {
          return {prefix + std::string(layer) + std::string(n.hf), n.transposed};
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
  const std::string type = hf.contains("model_type") && hf["model_type"].is_string()
                               ? hf["model_type"].get<std::string>()
                               : "";
  if (type != "gpt2") {
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
  const model::ParamLayout layout = model::gpt_param_layout(cfg);
  WEFT_CHECK(params.layout().slices().size() == layout.buffer.slices().size() &&
                 params.layout().numel() == layout.buffer.numel(),
             "the parameters are not the serial layout of model '", cfg.name, "'");
  std::vector<SafetensorsInput> tensors;
  std::vector<std::vector<float>> transposed;  // storage for the Conv1D weights
  transposed.reserve(params.layout().slices().size());
  for (const SliceSpec& sl : params.layout().slices()) {
    const HfName hf = hf_gpt2_name(sl.name);
    const Shape shape = hf_shape(cfg, sl.name, sl.shape, hf.transposed);
    const float* data = params.data() + sl.offset;
    if (hf.transposed) {
      transposed.emplace_back(static_cast<size_t>(sl.numel));
      transpose(data, sl.shape[0], sl.shape[1], transposed.back().data());
      data = transposed.back().data();
    }
    tensors.push_back({hf.name, shape, data});
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create: {}", out_dir, ec.message()));
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";  // transformers refuses a safetensors file without it
  Status s = write_safetensors((fs::path(out_dir) / kHfWeightsFile).string(), tensors, meta);
  if (!s.ok()) return s;
  return write_file_atomic((fs::path(out_dir) / kHfConfigFile).string(),
                           hf_gpt2_config(cfg, eot_id).dump(2) + "\n");
}

Result<HfModel> read_hf_gpt2(const std::string& in_dir, const HfImportOptions& options) {
  const std::string config_path = (fs::path(in_dir) / kHfConfigFile).string();
  const std::string weights_path = (fs::path(in_dir) / kHfWeightsFile).string();
  const auto text = read_text_file(config_path);
  if (!text) return Status::error(fmt::format("{}: cannot open", config_path));
  json hf;
  try {
    hf = json::parse(*text);
  } catch (const json::exception& e) {
    return Status::error(fmt::format("{}: not JSON: {}", config_path, e.what()));
  }
  auto reader_or = SafetensorsReader::open(weights_path);
  if (!reader_or.ok()) return reader_or.status();
  const SafetensorsReader reader = std::move(reader_or).value();
  const auto& meta = reader.header().metadata;

  std::string name = options.name;
  if (name.empty() && meta.count("weft.name")) name = meta.at("weft.name");
  if (name.empty()) {
    fs::path p = fs::path(in_dir).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();  // "dir/"
    name = p.filename().string();
  }
  if (name.empty() || name == "." || name == "..") name = "gpt2";
  int pad = options.pad_vocab_to;
  if (pad == 0 && meta.count("weft.pad_vocab_to")) {
    const std::string& v = meta.at("weft.pad_vocab_to");
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), pad);
    if (ec != std::errc() || p != v.data() + v.size() || pad < 1) {
      return Status::error(fmt::format(
          "{}: __metadata__ weft.pad_vocab_to='{}' is not a positive integer", weights_path, v));
    }
  }
  if (pad == 0) pad = model::GptConfig{}.pad_vocab_to;
  auto cfg_or = gpt_config_from_hf(hf, config_path, name, pad);
  if (!cfg_or.ok()) return cfg_or.status();
  HfModel out;
  out.config = cfg_or.value();
  out.metadata = meta;
  const model::GptConfig& cfg = out.config;

  // The file's tensors under their names without "transformer.".
  Status s;
  std::map<std::string, const SafetensorsTensor*> by_name;
  const SafetensorsTensor* lm_head = nullptr;
  for (const auto& t : reader.header().tensors) {
    std::string_view n = t.name;
    if (n.starts_with(kPrefix)) n.remove_prefix(kPrefix.size());
    if (is_mask_buffer(n)) continue;
    if (n == "lm_head.weight") {
      lm_head = &t;
      continue;
    }
    if (!by_name.emplace(std::string(n), &t).second) {
      s.add(fmt::format("{}: tensor '{}' appears with and without the '{}' prefix", weights_path, n,
                        kPrefix));
    }
  }
  const model::ParamLayout layout = model::gpt_param_layout(cfg);
  struct Target {
    const SafetensorsTensor* tensor;
    const SliceSpec* slice;
    bool transposed;
  };
  std::vector<Target> targets;
  for (const SliceSpec& sl : layout.buffer.slices()) {
    const HfName hf = hf_gpt2_name(sl.name);
    const std::string key = hf.name.substr(kPrefix.size());
    const Shape want = hf_shape(cfg, sl.name, sl.shape, hf.transposed);
    auto it = by_name.find(key);
    if (it == by_name.end()) {
      s.add(fmt::format("{}: tensor '{}' is missing (weft's {})", weights_path, hf.name, sl.name));
      continue;
    }
    if (it->second->shape != want) {
      s.add(fmt::format("{}: tensor '{}' has shape {}; {} says {}", weights_path, it->second->name,
                        shape_str(it->second->shape), kHfConfigFile, shape_str(want)));
    }
    targets.push_back({it->second, &sl, hf.transposed});
    by_name.erase(it);
  }
  for (const auto& [n, t] : by_name) {
    s.add(fmt::format("{}: tensor '{}' is not a GPT-2 parameter", weights_path, t->name));
  }
  if (lm_head != nullptr && lm_head->shape != Shape{cfg.vocab_size, cfg.n_embd}) {
    s.add(fmt::format("{}: lm_head.weight has shape {}, not wte's [{}, {}]", weights_path,
                      shape_str(lm_head->shape), cfg.vocab_size, cfg.n_embd));
  }
  if (!s.ok()) return s;

  out.params = FlatBuffer(layout.buffer);
  out.params.zero();  // wte's padding rows stay zero
  std::vector<float> scratch;
  for (const Target& t : targets) {
    float* dst = out.params.data() + t.slice->offset;
    if (!t.transposed) {
      if (Status r = reader.read(*t.tensor, dst); !r.ok()) return r;
      continue;
    }
    scratch.resize(static_cast<size_t>(t.slice->numel));
    if (Status r = reader.read(*t.tensor, scratch.data()); !r.ok()) return r;
    transpose(scratch.data(), t.slice->shape[1], t.slice->shape[0], dst);
  }
  if (lm_head != nullptr) {
    // Some exports keep the tied head as its own tensor; weft can take it only if it is wte.
    scratch.resize(static_cast<size_t>(int64_t{cfg.vocab_size} * cfg.n_embd));
    if (Status r = reader.read(*lm_head, scratch.data()); !r.ok()) return r;
    if (std::memcmp(scratch.data(), out.params.ptr("wte"), scratch.size() * sizeof(float)) != 0) {
      return Status::error(fmt::format(
          "{}: lm_head.weight differs from wte.weight; weft ties the LM head to the embedding",
          weights_path));
    }
  }
  return out;
}

Result<int> hf_tokenizer_eot(const std::string& tokenizer_dir) {
  const std::string path = (fs::path(tokenizer_dir) / "encoder.json").string();
  const auto text = read_text_file(path);
  if (!text) return Status::error(fmt::format("{}: cannot read the tokenizer", path));
  try {
    const auto j = nlohmann::json::parse(*text);
    if (!j.contains(kEndOfText) || !j.at(kEndOfText).is_number_integer()) {
      return Status::error(fmt::format("{}: no {} token", path, kEndOfText));
    }
    return j.at(kEndOfText).get<int>();
  } catch (const nlohmann::json::exception& e) {
    return Status::error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
}

Status write_hf_tokenizer(const std::string& out_dir, const std::string& tokenizer_dir, int n_ctx) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create: {}", out_dir, ec.message()));
  // GPT2Tokenizer's two files are weft's (and OpenAI's) under other names, byte for byte.
  for (const auto& [from, to] :
       {std::pair{"encoder.json", "vocab.json"}, std::pair{"vocab.bpe", "merges.txt"}}) {
    const std::string src = (fs::path(tokenizer_dir) / from).string();
    const auto text = read_text_file(src);
    if (!text) return Status::error(fmt::format("{}: cannot read the tokenizer", src));
    Status s = write_file_atomic((fs::path(out_dir) / to).string(), *text);
    if (!s.ok()) return s;
  }
  // transformers' tokenization_gpt2.py: <|endoftext|> is bos, eos and unk; no prefix space.
  const nlohmann::ordered_json special = {
      {"bos_token", kEndOfText}, {"eos_token", kEndOfText}, {"unk_token", kEndOfText}};
  nlohmann::ordered_json config = {{"add_prefix_space", false},
                                   {"model_max_length", n_ctx},
                                   {"tokenizer_class", "GPT2Tokenizer"}};
  config.update(special);
  Status s = write_file_atomic((fs::path(out_dir) / "tokenizer_config.json").string(),
                               config.dump(2) + "\n");
  if (!s.ok()) return s;
  return write_file_atomic((fs::path(out_dir) / "special_tokens_map.json").string(),
                           special.dump(2) + "\n");
}

Status export_hf_gpt2(const std::string& checkpoint, const std::string& out_dir,
                      const std::string& tokenizer_dir) {
  auto dir = resolve(checkpoint);
  if (!dir.ok()) return dir.status();
  auto md = read_metadata(dir.value());
  if (!md.ok()) return md.status();
  const Metadata& m = md.value();
  FlatBuffer params(model::gpt_param_layout(m.model).buffer);
  if (Status s = load(dir.value(), m.model, params, nullptr, nullptr); !s.ok()) return s;
  std::optional<int> eot;
  if (!tokenizer_dir.empty()) {
    auto id = hf_tokenizer_eot(tokenizer_dir);
    if (!id.ok()) return id.status();
    if (id.value() >= m.model.vocab_size) {
      return Status::error(fmt::format("{}: its {} id {} is outside the model's vocabulary of {}",
                                       tokenizer_dir, kEndOfText, id.value(), m.model.vocab_size));
    }
    eot = id.value();
    if (Status s = write_hf_tokenizer(out_dir, tokenizer_dir, m.model.max_seq_len); !s.ok()) {
      return s;
    }
  }
  return write_hf_gpt2(out_dir, m.model, params, eot,
                       {{"weft.name", m.model.name},
                        {"weft.pad_vocab_to", std::to_string(m.model.pad_vocab_to)},
                        {"weft.step", std::to_string(m.train.step)}});
}

Result<std::string> import_hf_gpt2(const std::string& in_dir, const std::string& out_root,
                                   const HfImportOptions& options, const std::string& tokenizer) {
  if (Status s = check_new_root(out_root, "import"); !s.ok()) return s;
  auto model = read_hf_gpt2(in_dir, options);
  if (!model.ok()) return model.status();
  const HfModel& m = model.value();
  TrainState state;
  state.tokenizer = !tokenizer.empty()                  ? tokenizer
                    : m.config.vocab_size == kGpt2Vocab ? "gpt2"
                                                        : "none";
  state.tokenizer_identity = state.tokenizer == "gpt2" ? "gpt2" : "";
  state.run_config = {{"imported_from", in_dir}};
  return save(out_root, m.config, m.params, nullptr, state);
}

}  // namespace weft::checkpoint
