#include "weft/checkpoint/hf.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstring>
#include <filesystem>
#include <vector>

#include "weft/checkpoint/checkpoint.h"
#include "weft/checkpoint/hf_gpt2.h"
#include "weft/checkpoint/hf_llama.h"
#include "weft/core/check.h"
#include "weft/core/pending_file.h"
#include "weft/core/text_file.h"
#include "weft/model/param_layout.h"

namespace weft::checkpoint {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kGpt2Vocab = 50257;  // GPT-2's tokenizer; <|endoftext|> is its last id
constexpr const char* kEndOfText = "<|endoftext|>";  // the one special token of byte-level BPE

// [R, K] -> [K, R].
void transpose(const float* in, int64_t R, int64_t K, float* out) {
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t k = 0; k < K; ++k) out[k * R + r] = in[r * K + k];
  }
}

}  // namespace

const char* hf_architecture_name(HfArchitecture a) {
  return a == HfArchitecture::Llama ? "LlamaForCausalLM" : "GPT2LMHeadModel";
}

Result<HfArchitecture> hf_architecture(const model::GptConfig& c) {
  // What each architecture, as weft writes it, cannot hold of cfg.
  std::vector<std::string> gpt2, llama;
  if (c.rope()) gpt2.push_back("position=rope (it learns a position table)");
  if (c.rms_norm()) gpt2.push_back("norm=rmsnorm (its norms are LayerNorms)");
  if (c.mlp == model::MlpKind::SwiGLU) gpt2.push_back("mlp=swiglu (its MLP is GeLU)");
  if (c.ffn() != 4 * c.n_embd) {
    gpt2.push_back(fmt::format("ffn_hidden_size={} (weft's GPT-2 MLP is 4 x n_embd)", c.ffn()));
  }
  if (c.kv_heads() != c.n_head) {
    gpt2.push_back(fmt::format("n_kv_head={} (one key/value head per query head)", c.kv_heads()));
  }
  if (!c.tie_embeddings) gpt2.push_back("tie_embeddings=false (its LM head is the embedding)");
  if (!c.bias) gpt2.push_back("bias=false (its linears and LayerNorms have biases)");
  if (c.norm_eps != 1e-5f) {
    gpt2.push_back(fmt::format("norm_eps={} (weft's GPT-2 LayerNorms use 1e-5)", c.norm_eps));
  }
  if (!c.rope()) llama.push_back("position=learned (it rotates: position=rope)");
  if (!c.rms_norm()) llama.push_back("norm=layernorm (its norms are RMSNorms)");
  if (c.mlp != model::MlpKind::SwiGLU) llama.push_back("mlp=gelu (its MLP is SwiGLU)");
  if (gpt2.empty()) return HfArchitecture::Gpt2;
  if (llama.empty()) return HfArchitecture::Llama;
  return Status::error(
      fmt::format("model '{}' is no architecture of Hugging Face transformers that weft writes: "
                  "GPT2LMHeadModel cannot hold {}; LlamaForCausalLM cannot hold {}",
                  c.name, fmt::join(gpt2, ", "), fmt::join(llama, ", ")));
}

Result<HfDir> open_hf_dir(const std::string& in_dir, const HfImportOptions& options,
                          const std::string& default_name) {
  HfDir d;
  d.config_path = (fs::path(in_dir) / kHfConfigFile).string();
  d.weights_path = (fs::path(in_dir) / kHfWeightsFile).string();
  const auto text = read_text_file(d.config_path);
  if (!text) return Status::error(fmt::format("{}: cannot open", d.config_path));
  try {
    d.config = json::parse(*text);
  } catch (const json::exception& e) {
    return Status::error(fmt::format("{}: not JSON: {}", d.config_path, e.what()));
  }
  auto reader_or = SafetensorsReader::open(d.weights_path);
  if (!reader_or.ok()) return reader_or.status();
  d.reader = std::move(reader_or).value();
  const auto& meta = d.reader.header().metadata;

  d.name = options.name;
  if (d.name.empty() && meta.count("weft.name")) d.name = meta.at("weft.name");
  if (d.name.empty()) {
    fs::path p = fs::path(in_dir).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();  // "dir/"
    d.name = p.filename().string();
  }
  if (d.name.empty() || d.name == "." || d.name == "..") d.name = default_name;
  d.pad_vocab_to = options.pad_vocab_to;
  if (d.pad_vocab_to == 0 && meta.count("weft.pad_vocab_to")) {
    const std::string& v = meta.at("weft.pad_vocab_to");
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d.pad_vocab_to);
    if (ec != std::errc() || p != v.data() + v.size() || d.pad_vocab_to < 1) {
      return Status::error(fmt::format(
          "{}: __metadata__ weft.pad_vocab_to='{}' is not a positive integer", d.weights_path, v));
    }
  }
  if (d.pad_vocab_to == 0) d.pad_vocab_to = model::GptConfig{}.pad_vocab_to;
  return d;
}

Status write_hf_dir(const std::string& out_dir, const model::GptConfig& cfg,
                    const FlatBuffer& params, HfArchitecture want, const HfPartsOf& parts,
                    const nlohmann::ordered_json& config,
                    const std::map<std::string, std::string>& metadata) {
  auto arch = hf_architecture(cfg);
  if (!arch.ok()) return arch.status();
  if (arch.value() != want) {
    return Status::error(fmt::format("model '{}' is a {}, not a {}", cfg.name,
                                     hf_architecture_name(arch.value()),
                                     hf_architecture_name(want)));
  }
  const model::ParamLayout layout = model::gpt_param_layout(cfg);
  WEFT_CHECK(params.layout().slices().size() == layout.buffer.slices().size() &&
                 params.layout().numel() == layout.buffer.numel(),
             "the parameters are not the serial layout of model '", cfg.name, "'");
  std::vector<SafetensorsInput> tensors;
  std::vector<std::vector<float>> transposed;  // storage for the transposed parts
  for (const SliceSpec& sl : params.layout().slices()) {
    const float* data = params.data() + sl.offset;
    for (const HfPart& part : parts(sl)) {
      const float* src = data;
      if (part.transposed) {
        transposed.emplace_back(static_cast<size_t>(numel(part.shape)));
        transpose(data, part.shape[1], part.shape[0], transposed.back().data());
        src = transposed.back().data();
      }
      tensors.push_back({part.name, part.shape, src});
      data += numel(part.shape);
    }
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::error(fmt::format("{}: cannot create: {}", out_dir, ec.message()));
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";  // transformers refuses a safetensors file without it
  Status s = write_safetensors((fs::path(out_dir) / kHfWeightsFile).string(), tensors, meta);
  if (!s.ok()) return s;
  return write_file_atomic((fs::path(out_dir) / kHfConfigFile).string(), config.dump(2) + "\n");
}

Result<HfModel> read_hf_model(const HfDir& dir, const model::GptConfig& cfg, const HfPartsOf& parts,
                              HfTensors tensors) {
  Status s = std::move(tensors.problems);
  const model::ParamLayout layout = model::gpt_param_layout(cfg);
  struct Target {
    const SafetensorsTensor* tensor;
    int64_t offset;  // in the flat buffer
    HfPart part;
  };
  std::vector<Target> targets;
  for (const SliceSpec& sl : layout.buffer.slices()) {
    int64_t offset = sl.offset;
    for (HfPart& part : parts(sl)) {
      const int64_t n = numel(part.shape);
      auto it = tensors.by_name.find(part.name);
      if (it == tensors.by_name.end()) {
        s.add(fmt::format("{}: tensor '{}' is missing (weft's {})", dir.weights_path, part.name,
                          sl.name));
      } else {
        const SafetensorsTensor* t = it->second;
        if (t->shape != part.shape) {
          s.add(fmt::format("{}: tensor '{}' has shape {}; {} says {}", dir.weights_path, t->name,
                            shape_str(t->shape), kHfConfigFile, shape_str(part.shape)));
        }
        targets.push_back({t, offset, std::move(part)});
        tensors.by_name.erase(it);
      }
      offset += n;
    }
  }
  for (const auto& [n, t] : tensors.by_name) {
    s.add(fmt::format("{}: tensor '{}' is not {}", dir.weights_path, t->name, tensors.stray));
  }
  const SafetensorsTensor* head = tensors.tied_head;
  if (head != nullptr && head->shape != Shape{cfg.vocab_size, cfg.n_embd}) {
    s.add(fmt::format("{}: lm_head.weight has shape {}, not {} [{}, {}]", dir.weights_path,
                      shape_str(head->shape), tensors.embedding, cfg.vocab_size, cfg.n_embd));
  }
  if (!s.ok()) return s;

  HfModel out{cfg, FlatBuffer(layout.buffer), dir.reader.header().metadata};
  out.params.zero();  // the vocabulary's padding rows stay zero
  std::vector<float> scratch;
  for (const Target& t : targets) {
    float* dst = out.params.data() + t.offset;
    if (!t.part.transposed) {
      if (Status r = dir.reader.read(*t.tensor, dst); !r.ok()) return r;
      continue;
    }
    scratch.resize(static_cast<size_t>(numel(t.part.shape)));
    if (Status r = dir.reader.read(*t.tensor, scratch.data()); !r.ok()) return r;
    transpose(scratch.data(), t.part.shape[0], t.part.shape[1], dst);
  }
  if (head != nullptr) {
    scratch.resize(static_cast<size_t>(int64_t{cfg.vocab_size} * cfg.n_embd));
    if (Status r = dir.reader.read(*head, scratch.data()); !r.ok()) return r;
    if (std::memcmp(scratch.data(), out.params.ptr("wte"), scratch.size() * sizeof(float)) != 0) {
      return Status::error(tensors.head_differs);
    }
  }
  return out;
}

Status write_hf(const std::string& out_dir, const model::GptConfig& cfg, const FlatBuffer& params,
                std::optional<int> eot_id, const std::map<std::string, std::string>& metadata) {
  auto arch = hf_architecture(cfg);
  if (!arch.ok()) return arch.status();
  return arch.value() == HfArchitecture::Llama
             ? write_hf_llama(out_dir, cfg, params, eot_id, metadata)
             : write_hf_gpt2(out_dir, cfg, params, eot_id, metadata);
}

Result<HfModel> read_hf(const std::string& in_dir, const HfImportOptions& options) {
  // The model_type decides; a file without a readable one is read as GPT-2, whose reader names
  // the problem.
  const auto text = read_text_file((fs::path(in_dir) / kHfConfigFile).string());
  if (text) {
    const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("model_type") && j["model_type"] == "llama") {
      return read_hf_llama(in_dir, options);
    }
  }
  return read_hf_gpt2(in_dir, options);
}

Result<int> hf_tokenizer_eot(const std::string& tokenizer_dir) {
  const std::string path = (fs::path(tokenizer_dir) / "encoder.json").string();
  const auto text = read_text_file(path);
  if (!text) return Status::error(fmt::format("{}: cannot read the tokenizer", path));
  try {
    const auto j = json::parse(*text);
    if (!j.contains(kEndOfText) || !j.at(kEndOfText).is_number_integer()) {
      return Status::error(fmt::format("{}: no {} token", path, kEndOfText));
    }
    return j.at(kEndOfText).get<int>();
  } catch (const json::exception& e) {
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

Result<HfArchitecture> export_hf(const std::string& checkpoint, const std::string& out_dir,
                                 const std::string& tokenizer_dir) {
  auto dir = resolve(checkpoint);
  if (!dir.ok()) return dir.status();
  auto md = read_metadata(dir.value());
  if (!md.ok()) return md.status();
  const Metadata& m = md.value();
  // Refused before anything is read or written.
  auto arch = hf_architecture(m.model);
  if (!arch.ok()) return arch.status();
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
  // Beside the tensors, so that an import restores the name, the padding and the step.
  const std::map<std::string, std::string> meta = {
      {"weft.name", m.model.name},
      {"weft.pad_vocab_to", std::to_string(m.model.pad_vocab_to)},
      {"weft.step", std::to_string(m.train.step)}};
  Status s = write_hf(out_dir, m.model, params, eot, meta);
  if (!s.ok()) return s;
  return arch.value();
}

Result<std::string> import_hf(const std::string& in_dir, const std::string& out_root,
                              const HfImportOptions& options, const std::string& tokenizer) {
  if (Status s = check_new_root(out_root, "import"); !s.ok()) return s;
  auto model = read_hf(in_dir, options);
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
