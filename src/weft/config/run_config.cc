#include "weft/config/run_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <variant>

#include <toml++/toml.h>

#include "weft/checkpoint/checkpoint.h"
#include "weft/core/suggest.h"
#include "weft/core/text_file.h"
#include "weft/core/toml_reader.h"
#include "weft/core/weft_files.h"
#include "weft/data/sampler.h"
#include "weft/model/param_layout.h"
#include "weft/parallel/topology.h"
#include "weft/schedule/instr.h"
#include "weft/schedule/schedule.h"

namespace weft::config {
namespace {

using FieldRef =
    std::variant<int*, int64_t*, double*, std::string*, bool*, schedule::Kind*, model::Recompute*>;

// The keys whose value is a name (a string in TOML), kept as its enum past parsing.
std::string name_of(schedule::Kind k) { return std::string(schedule::kind_name(k)); }
std::string name_of(model::Recompute r) { return std::string(model::recompute_name(r)); }
bool parse_name(const std::string& name, schedule::Kind& out) {
  auto k = schedule::parse_kind(name);
  if (k.ok()) out = k.value();
  return k.ok();
}
bool parse_name(const std::string& name, model::Recompute& out) {
  const auto r = model::parse_recompute(name);
  if (r) out = *r;
  return r.has_value();
}
const char* choices(schedule::Kind) { return "gpipe, 1f1b, interleaved or zb-h1"; }
const char* choices(model::Recompute) { return "none, selective or full"; }

// One key's value from its TOML node: a type error to `types`; a name no enum has to `names`,
// and the key to `unnamed`.
template <class T>
void read_key(const toml::node* node, const char* key, T& out, Status& types, Status& names,
              std::vector<std::string>& unnamed) {
  if constexpr (std::is_enum_v<T>) {
    std::string name = name_of(out);
    read_toml(node, key, name, types);
    if (!parse_name(name, out)) {
      names.add(fmt::format("{}='{}' must be {}", key, name, choices(out)));
      unnamed.emplace_back(key);
    }
  } else {
    read_toml(node, key, out, types);
  }
}

// One key of [data], [train], [run] or [parallel]: where it lives in RunConfig and what it means.
// [model] keys are GptConfig's and are parsed by model::parse_gpt_config.
struct Binding {
  const char* name;
  FieldRef (*field)(RunConfig&);
  const char* help;
};

#define WEFT_FIELD(member) [](RunConfig& c) -> FieldRef { return &c.member; }

const std::vector<Binding>& bindings() {
  static const std::vector<Binding> b = {
      {"data.train", WEFT_FIELD(data.train),
       "dataset: a Megatron PREFIX (PREFIX.bin + PREFIX.idx) or an llm.c .bin (required)"},
      {"data.val_fraction", WEFT_FIELD(data.val_fraction),
       "fraction of the windows, at the end of the stream, held out for validation"},
      {"data.tokenizer", WEFT_FIELD(data.tokenizer),
       "\"gpt2\", a tokenizer directory (encoder.json + vocab.bpe), or \"none\" (ids only)"},
      {"train.seq_len", WEFT_FIELD(train.seq_len), "sequence length T; 0: model.max_seq_len"},
      {"train.micro_batch", WEFT_FIELD(parallel.micro_batch), "sequences per forward/backward"},
      {"train.global_batch", WEFT_FIELD(train.global_batch),
       "sequences per optimizer step (gradient accumulation over global/micro microbatches); 0: "
       "micro_batch x dp"},
      {"train.steps", WEFT_FIELD(train.steps), "optimizer steps of the whole run (required)"},
      {"train.lr", WEFT_FIELD(train.lr), "peak learning rate, reached after warmup"},
      {"train.min_lr", WEFT_FIELD(train.min_lr), "learning rate at the last step (cosine decay)"},
      {"train.warmup_steps", WEFT_FIELD(train.warmup_steps), "steps of linear warmup"},
      {"train.weight_decay", WEFT_FIELD(train.weight_decay),
       "AdamW decoupled weight decay (matrices and embeddings only)"},
      {"train.beta1", WEFT_FIELD(train.beta1), "AdamW beta1"},
      {"train.beta2", WEFT_FIELD(train.beta2), "AdamW beta2"},
      {"train.eps", WEFT_FIELD(train.eps), "AdamW epsilon"},
      {"train.clip", WEFT_FIELD(train.clip), "global gradient-norm clipping; 0: off"},
      {"train.max_skipped_steps", WEFT_FIELD(train.max_skipped_steps),
       "consecutive steps with a non-finite loss or gradient norm (skipped) before the run stops "
       "with an error; 0: never"},
      {"train.eval_every", WEFT_FIELD(train.eval_every),
       "validation loss every N steps and at the end; 0: never"},
      {"train.eval_batches", WEFT_FIELD(train.eval_batches),
       "micro batches of fixed validation windows per evaluation (the replicas share them: the "
       "same windows as one process)"},
      {"train.save_every", WEFT_FIELD(train.save_every),
       "checkpoint every N steps (always at the end and on SIGINT/SIGTERM); 0: only then"},
      {"train.keep_last", WEFT_FIELD(train.keep_last), "checkpoints kept; 0: all"},
      {"train.async_checkpoint", WEFT_FIELD(train.async_checkpoint),
       "periodic checkpoints written in the background from a copy in host memory (12 bytes per "
       "parameter a rank holds) while training goes on; false: training waits for each write"},
      {"train.seed", WEFT_FIELD(train.seed), "seed of the initialization and the data order"},
      {"train.threads", WEFT_FIELD(train.threads), "kernel threads; 0: every core"},
      {"train.recompute", WEFT_FIELD(parallel.recompute),
       "activation recomputation: none, selective or full"},
      {"train.log_every", WEFT_FIELD(train.log_every),
       "a log line every N steps when stderr is not a terminal"},
      {"train.peak_gflops", WEFT_FIELD(train.peak_gflops),
       "the machine's spec peak (GFLOP/s) for MFU; 0: MFU against the measured GEMM ceiling only"},
      {"train.comm_timeout", WEFT_FIELD(train.comm_timeout),
       "seconds a rank waits for its peers before it ends the job, naming the rank that did not "
       "arrive; 0: WEFT_COMM_TIMEOUT, else 300"},
      {"run.out_dir", WEFT_FIELD(run.out_dir),
       "where metrics.jsonl, loss.svg and checkpoints/ go; default runs/<RUN.toml's stem>"},
      {"parallel.tp", WEFT_FIELD(parallel.tp),
       "tensor-parallel size: each layer's matrices split across tp ranks (run under mpirun)"},
      {"parallel.sequence_parallel", WEFT_FIELD(parallel.sequence_parallel),
       "with tp > 1, also split the LayerNorm and residual regions along the sequence"},
      {"parallel.pp", WEFT_FIELD(parallel.pp),
       "pipeline-parallel size: the layers split into pp*vp stages over pp ranks"},
      {"parallel.dp", WEFT_FIELD(parallel.dp),
       "data-parallel size: replicas, each reading 1/dp of every global batch"},
      {"parallel.vp", WEFT_FIELD(parallel.vp),
       "model chunks per pipeline rank (interleaved schedule)"},
      {"parallel.schedule", WEFT_FIELD(parallel.schedule),
       "pipeline schedule: gpipe, 1f1b, interleaved or zb-h1"},
      {"parallel.zero", WEFT_FIELD(parallel.zero),
       "ZeRO stage over the dp replicas: 0 (none), 1 (optimizer state sharded), 2 (+ gradients), 3 "
       "(+ parameters)"},
      {"parallel.auto", WEFT_FIELD(auto_layout),
       "when tp*pp*dp is not the number of ranks started: the planner's fastest layout for them "
       "instead (same model, global batch, seq_len, micro_batch and recompute)"},
  };
  return b;
}
#undef WEFT_FIELD

struct ModelKey {
  const char* key;
  KeyType type;
  const char* help;
};
const std::vector<ModelKey>& model_keys() {
  static const std::vector<ModelKey> k = {
      {"config", KeyType::String,
       "a model config file (configs/models/*.toml); other [model] keys override it"},
      {"name", KeyType::String, "model name"},
      {"n_layer", KeyType::Int, "layers L"},
      {"n_embd", KeyType::Int, "hidden size C"},
      {"n_head", KeyType::Int, "attention heads NH"},
      {"vocab_size", KeyType::Int, "vocabulary V (at least the tokenizer's)"},
      {"pad_vocab_to", KeyType::Int, "the vocabulary is padded to a multiple of this"},
      {"max_seq_len", KeyType::Int, "the longest sequence (the learned position table's size)"},
      {"position", KeyType::String, "position embedding: learned (GPT-2) or rope (rotary)"},
      {"rope_theta", KeyType::Float, "RoPE's base theta (10000; Llama 3: 500000)"},
      {"norm", KeyType::String, "normalization: layernorm (GPT-2) or rmsnorm"},
      {"norm_eps", KeyType::Float, "the normalization's epsilon (1e-5)"},
      {"mlp", KeyType::String, "MLP: gelu (GPT-2) or swiglu"},
      {"ffn_hidden_size", KeyType::Int, "the MLP's inner width F (0: 4*n_embd)"},
      {"n_kv_head", KeyType::Int, "key/value heads, grouped-query attention (0: n_head)"},
      {"tie_embeddings", KeyType::Bool, "the LM head reads the token embedding (GPT-2)"},
      {"bias", KeyType::Bool, "biases in the linear layers and LayerNorms (GPT-2)"},
  };
  return k;
}

const std::vector<std::string> kSections = {"model", "data", "train", "run", "parallel"};

KeyType type_of(const FieldRef& f) {
  if (std::holds_alternative<double*>(f)) return KeyType::Float;
  if (std::holds_alternative<std::string*>(f) || std::holds_alternative<schedule::Kind*>(f) ||
      std::holds_alternative<model::Recompute*>(f)) {
    return KeyType::String;
  }
  if (std::holds_alternative<bool*>(f)) return KeyType::Bool;
  return KeyType::Int;
}

std::vector<std::string> all_key_names() {
  std::vector<std::string> names;
  for (const auto& k : run_config_keys()) names.push_back(k.name);
  return names;
}

std::optional<KeyType> key_type(const std::string& name) {
  for (const auto& k : run_config_keys()) {
    if (k.name == name) return k.type;
  }
  return std::nullopt;
}

// "section.key=value" -> written into root, typed by the key; problems go to s.
void apply_override(toml::table& root, const std::string& text, Status& s) {
  const auto eq = text.find('=');
  const std::string name = text.substr(0, eq);
  const auto dot = name.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 == name.size()) {
    s.add(fmt::format("--set {}: expected section.key=value (e.g. train.lr=3e-4)", text));
    return;
  }
  const std::string value = text.substr(eq + 1);
  const auto type = key_type(name);
  if (!type) {
    s.add(
        fmt::format("--set {}: unknown key {}{}", text, name, did_you_mean(name, all_key_names())));
    return;
  }
  const std::string section = name.substr(0, dot), key = name.substr(dot + 1);
  if (!root.contains(section)) root.insert(section, toml::table{});
  toml::table* t = root[section].as_table();
  if (t == nullptr) return;  // reported when the sections are checked
  switch (*type) {
    case KeyType::Int: {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || p != value.data() + value.size()) {
        s.add(fmt::format("--set {}: {} takes an integer, not '{}'", text, name, value));
        return;
      }
      t->insert_or_assign(key, v);
      break;
    }
    case KeyType::Float: {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0') {
        s.add(fmt::format("--set {}: {} takes a number, not '{}'", text, name, value));
        return;
      }
      t->insert_or_assign(key, v);
      break;
    }
    case KeyType::Bool: {
      if (value != "true" && value != "false" && value != "1" && value != "0") {
        s.add(fmt::format("--set {}: {} takes true or false, not '{}'", text, name, value));
        return;
      }
      t->insert_or_assign(key, value == "true" || value == "1");
      break;
    }
    case KeyType::String: {
      std::string v = value;
      if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) {
        v = v.substr(1, v.size() - 2);
      }
      t->insert_or_assign(key, v);
      break;
    }
  }
}

// The [model] table: model.config's [model] (when given), overlaid with the inline keys.
void parse_model(const toml::table& root, const std::string& origin, RunConfig& c, Status& s) {
  const toml::table* inline_tbl = root["model"].as_table();
  if (inline_tbl == nullptr) {
    s.add(fmt::format("{}: missing [model] table (the model's keys inline, or config = \"path\")",
                      origin));
    return;
  }
  toml::table merged;
  std::string model_origin = origin;
  if (auto path = (*inline_tbl)["config"].value<std::string>()) {
    c.model_config = *path;
    model_origin = *path;
    const auto text = read_text_file(find_weft_file(*path));
    if (!text) {
      s.add(fmt::format("{}: cannot open model config {} (model.config)", origin, *path));
      return;
    }
    const auto file = parse_toml(*text, *path);
    if (!file.ok()) {
      s.merge(file.status());
      return;
    }
    if (const toml::table* m = file.value()["model"].as_table()) merged = *m;
  } else if ((*inline_tbl)["config"]) {
    s.add(fmt::format("{}: model.config must be a string", origin));
  }
  std::vector<std::string> known;
  for (const auto& k : model_keys()) known.push_back(k.key);
  // Keys that change the model file's value ("n_layer=100000"): the model is then no longer the
  // one its file names, and the logs must not say it is.
  std::vector<std::string> changed;
  for (const auto& [key, node] : *inline_tbl) {
    const std::string k(key.str());
    if (k == "config") continue;
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      s.add(fmt::format("{}: unknown key model.{}{}", origin, k, did_you_mean(k, known)));
      continue;
    }
    if (!c.model_config.empty() && k != "name" && merged.contains(k)) {
      std::stringstream was, is;
      was << merged[k];
      is << toml::node_view<const toml::node>(&node);
      if (was.str() != is.str()) changed.push_back(k + "=" + is.str());
    }
    merged.insert_or_assign(k, node);
  }
  if (!changed.empty() && !(*inline_tbl)["name"]) {
    std::string name = merged["name"].value_or(std::string("model"));
    for (const std::string& kv : changed) name += "+" + kv;
    merged.insert_or_assign("name", name);
  }
  std::stringstream text;
  text << toml::table{{"model", merged}};
  auto cfg = model::parse_gpt_config(text.str(), model_origin);
  if (!cfg.ok()) {
    s.merge(cfg.status());
    return;
  }
  c.model = cfg.value();
}

}  // namespace

optim::AdamWConfig RunConfig::adamw() const {
  return {.beta1 = static_cast<float>(train.beta1),
          .beta2 = static_cast<float>(train.beta2),
          .eps = static_cast<float>(train.eps),
          .weight_decay = static_cast<float>(train.weight_decay)};
}
data::SamplerConfig RunConfig::sampler(int dp_rank) const {
  return {.seq_len = train.seq_len,
          .micro_batch = parallel.micro_batch,
          .microbatches = microbatches(),
          .val_fraction = data.val_fraction,
          .seed = static_cast<uint64_t>(train.seed),
          .dp_rank = dp_rank,
          .dp_size = parallel.dp};
}
std::string RunConfig::checkpoint_root() const {
  return (std::filesystem::path(run.out_dir) / "checkpoints").string();
}
std::string RunConfig::metrics_path() const {
  return (std::filesystem::path(run.out_dir) / "metrics.jsonl").string();
}

nlohmann::json RunConfig::to_json() const {
  nlohmann::json j;
  j["model"] = checkpoint::config_to_json(model);
  if (!model_config.empty()) j["model"]["config"] = model_config;
  RunConfig copy = *this;
  for (const auto& b : bindings()) {
    const std::string name = b.name;
    const auto dot = name.find('.');
    auto& slot = j[name.substr(0, dot)][name.substr(dot + 1)];
    std::visit(
        [&](auto* p) {
          if constexpr (std::is_enum_v<std::remove_pointer_t<decltype(p)>>) {
            slot = name_of(*p);
          } else {
            slot = *p;
          }
        },
        b.field(copy));
  }
  return j;
}

const std::vector<KeyInfo>& run_config_keys() {
  static const std::vector<KeyInfo> keys = [] {
    std::vector<KeyInfo> out;
    for (const auto& k : model_keys()) {
      out.push_back({std::string("model.") + k.key, k.type, "", k.help});
    }
    RunConfig defaults;
    for (const auto& b : bindings()) {
      const FieldRef f = b.field(defaults);
      std::string def = std::visit(
          [](auto* p) -> std::string {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_enum_v<T>) {
              return fmt::format("\"{}\"", name_of(*p));
            } else if constexpr (std::is_same_v<T, std::string>) {
              return p->empty() ? "" : fmt::format("\"{}\"", *p);
            } else if constexpr (std::is_same_v<T, bool>) {
              return *p ? "true" : "false";
            } else {
              return fmt::format("{}", *p);
            }
          },
          f);
      out.push_back({b.name, type_of(f), def, b.help});
    }
    return out;
  }();
  return keys;
}

Result<RunConfig> parse_run_config(const std::string& toml_text, const std::string& origin,
                                   const std::vector<std::string>& overrides) {
  auto parsed = parse_toml(toml_text, origin);
  if (!parsed.ok()) return parsed.status();
  toml::table root = std::move(parsed).value();
  Status s;
  for (const auto& o : overrides) apply_override(root, o, s);

  // Unknown sections and keys, each with the nearest known name.
  std::vector<std::string> names = all_key_names();
  for (const auto& [key, node] : root) {
    const std::string section(key.str());
    if (std::find(kSections.begin(), kSections.end(), section) == kSections.end()) {
      s.add(fmt::format("{}: unknown section [{}]{}", origin, section,
                        did_you_mean(section, kSections)));
      continue;
    }
    const toml::table* t = node.as_table();
    if (t == nullptr) {
      s.add(fmt::format("{}: {} must be a table ([{}])", origin, section, section));
      continue;
    }
    if (section == "model") continue;  // parse_model() checks its keys
    for (const auto& [k, v] : *t) {
      const std::string name = section + "." + std::string(k.str());
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        s.add(fmt::format("{}: unknown key {}{}", origin, name, did_you_mean(name, names)));
      }
    }
  }

  RunConfig c;
  c.origin = origin;
  Status types;      // each "train.lr must be a number", from the file
  Status bad_names;  // each "parallel.schedule='2f2b' must be ...", reported with validate()'s
  std::vector<std::string> unnamed;  // those keys
  for (const auto& b : bindings()) {
    const toml::node* node = root.at_path(b.name).node();
    std::visit([&](auto* p) { read_key(node, b.name, *p, types, bad_names, unnamed); }, b.field(c));
  }
  s.merge(types.prefixed(origin));
  parse_model(root, origin, c, s);
  if (!s.ok()) return s;

  // Derived defaults.
  if (c.train.seq_len == 0) c.train.seq_len = c.model.max_seq_len;
  if (c.train.global_batch == 0) {
    const int64_t one_each = int64_t{c.parallel.micro_batch} * c.parallel.dp;
    if (one_each > std::numeric_limits<int>::max()) {
      s.add(fmt::format("{}: train.micro_batch={} x parallel.dp={} is too large", origin,
                        c.parallel.micro_batch, c.parallel.dp));
      return s;
    }
    c.train.global_batch = static_cast<int>(one_each);
  }
  if (c.run.out_dir.empty()) {
    c.run.out_dir = (std::filesystem::path("runs") / std::filesystem::path(origin).stem()).string();
  }
  s.merge(bad_names.prefixed(origin));
  // An unknown name is its own problem: the checks of the default the config keeps in its place
  // (validate() names the key and its value: "parallel.schedule='1f1b' ...") would only confuse.
  const Status checked = validate(c);
  for (const std::string& problem : checked.problems()) {
    const bool of_unnamed = std::any_of(unnamed.begin(), unnamed.end(), [&](const std::string& k) {
      return problem.find(k + "='") != std::string::npos;
    });
    if (!of_unnamed) s.add(problem);
  }
  if (!s.ok()) return s;
  return c;
}

Result<RunConfig> load_run_config(const std::string& path,
                                  const std::vector<std::string>& overrides) {
  const auto text = read_text_file(path);
  if (!text) return Status::error(fmt::format("{}: cannot open run config", path));
  return parse_run_config(*text, path, overrides);
}

Status validate(const RunConfig& c) {
  Status s;
  const auto& t = c.train;
  auto add = [&](std::string problem) { s.add(fmt::format("{}: {}", c.origin, problem)); };
  if (c.data.train.empty()) add("data.train is missing (the dataset to train on)");
  if (!(c.data.val_fraction >= 0 && c.data.val_fraction < 1)) {
    add(fmt::format("data.val_fraction={} must be in [0, 1)", c.data.val_fraction));
  }
  if (c.data.tokenizer.empty()) add("data.tokenizer is empty (\"gpt2\", a directory, or \"none\")");
  if (t.seq_len <= 0) add(fmt::format("train.seq_len={} must be > 0", t.seq_len));
  if (c.model.max_seq_len > 0 && t.seq_len > c.model.max_seq_len) {
    add(fmt::format("train.seq_len={} is larger than the position table (model.max_seq_len={})",
                    t.seq_len, c.model.max_seq_len));
  }
  if (t.steps <= 0) add(fmt::format("train.steps={} must be > 0", t.steps));
  if (!(t.lr > 0)) add(fmt::format("train.lr={} must be > 0", t.lr));
  if (!(t.min_lr >= 0 && t.min_lr <= t.lr)) {
    add(fmt::format("train.min_lr={} must be in [0, train.lr={}]", t.min_lr, t.lr));
  }
  if (t.warmup_steps < 0) add(fmt::format("train.warmup_steps={} must be >= 0", t.warmup_steps));
  if (!(t.weight_decay >= 0))
    add(fmt::format("train.weight_decay={} must be >= 0", t.weight_decay));
  if (!(t.beta1 >= 0 && t.beta1 < 1)) add(fmt::format("train.beta1={} must be in [0, 1)", t.beta1));
  if (!(t.beta2 >= 0 && t.beta2 < 1)) add(fmt::format("train.beta2={} must be in [0, 1)", t.beta2));
  if (!(t.eps > 0)) add(fmt::format("train.eps={} must be > 0", t.eps));
  if (!(t.clip >= 0)) add(fmt::format("train.clip={} must be >= 0 (0: no clipping)", t.clip));
  if (t.eval_every < 0) add(fmt::format("train.eval_every={} must be >= 0", t.eval_every));
  if (t.eval_every > 0 && t.eval_batches <= 0) {
    add(fmt::format("train.eval_batches={} must be > 0 when train.eval_every > 0", t.eval_batches));
  }
  if (t.eval_every > 0 && c.data.val_fraction == 0) {
    add(
        fmt::format("train.eval_every={} needs validation data: set data.val_fraction > 0 (or "
                    "train.eval_every = 0)",
                    t.eval_every));
  }
  if (t.save_every < 0) add(fmt::format("train.save_every={} must be >= 0", t.save_every));
  if (t.max_skipped_steps < 0) {
    add(fmt::format("train.max_skipped_steps={} must be >= 0 (0: never stop)",
                    t.max_skipped_steps));
  }
  if (t.keep_last < 0)
    add(fmt::format("train.keep_last={} must be >= 0 (0: keep all)", t.keep_last));
  if (t.seed < 0) add(fmt::format("train.seed={} must be >= 0", t.seed));
  if (t.threads < 0) add(fmt::format("train.threads={} must be >= 0 (0: every core)", t.threads));
  if (t.log_every <= 0) add(fmt::format("train.log_every={} must be > 0", t.log_every));
  if (!(t.peak_gflops >= 0)) add(fmt::format("train.peak_gflops={} must be >= 0", t.peak_gflops));
  if (!(t.comm_timeout >= 0)) {
    add(fmt::format("train.comm_timeout={} must be >= 0", t.comm_timeout));
  }
  if (c.run.out_dir.empty()) add("run.out_dir is empty");

  // The layout (micro_batch and global_batch included): the one rule book.
  s.merge(validate_layout(c));
  return s;
}

Status validate_layout(const RunConfig& c) {
  return layout::validate(c.model, c.parallel,
                          {.global_batch = c.train.global_batch, .seq_len = c.train.seq_len})
      .prefixed(c.origin);
}

Status validate_world(const RunConfig& c, int world_size) {
  const parallel::GridShape grid = c.parallel.grid();
  const Status s = parallel::validate(grid, world_size);
  if (s.ok()) return s;
  return Status::error(s.message(fmt::format(
      "{}: the parallel layout does not match the {} process(es) started (start tp*pp*dp ranks: "
      "mpirun -n {} weft train ...)",
      c.origin, world_size, std::max(1, grid.world()))));
}

Status validate_data(const RunConfig& c, const data::TokenDataset& ds,
                     const std::string& tokenizer_identity, int tokenizer_vocab) {
  Status s = data::check_vocabulary(ds, c.data.train, c.model.vocab_size, tokenizer_identity,
                                    tokenizer_vocab);
  const auto& t = c.train;
  const auto split = data::split_windows(ds.num_tokens(), t.seq_len, c.data.val_fraction);
  if (split.train < t.global_batch) {
    s.add(fmt::format(
        "{}: {} tokens make {} windows of train.seq_len+1={} tokens, {} for training after "
        "data.val_fraction={}: fewer than one global batch (train.global_batch={})",
        c.data.train, ds.num_tokens(), split.windows, t.seq_len + 1, split.train,
        c.data.val_fraction, t.global_batch));
  }
  const int64_t val_needed = int64_t{t.eval_batches} * c.parallel.micro_batch;
  if (t.eval_every > 0 && split.val < val_needed) {
    s.add(
        fmt::format("{}: the validation split has {} windows (data.val_fraction={}), fewer than "
                    "train.eval_batches x train.micro_batch = {}; raise data.val_fraction or lower "
                    "train.eval_batches",
                    c.data.train, split.val, c.data.val_fraction, val_needed));
  }
  return s;
}

}  // namespace weft::config
