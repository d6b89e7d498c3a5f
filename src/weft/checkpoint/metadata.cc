#include "weft/checkpoint/checkpoint.h"

// metadata.json: Metadata to JSON and back, every field checked for its type and range (the text
// is user input: it may be damaged, or of another program). Kept apart from checkpoint.cc's file
// I/O so the parser can be fuzzed on its own (tests/fuzz/checkpoint_metadata_fuzz.cc).

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>

namespace weft::checkpoint {
using nlohmann::json;

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

namespace {

// Typed access to metadata fields. A missing key, or a value of the wrong type or range, throws
// FieldError naming the field by its path ("parallel.tp"); parse_metadata() turns it into a Status.
// (nlohmann's get<int>() would convert 1e300 or 2^40 silently, and undefinedly.)
struct FieldError {
  std::string message;
};

std::string shown(const json& v) {
  std::string d = v.dump();
  return d.size() <= 40 ? d : d.substr(0, 37) + "...";
}

const json& field(const json& j, const std::string& path, const char* key) {
  const std::string full = path.empty() ? key : path + "." + key;
  if (!j.is_object() || !j.contains(key)) throw FieldError{full + " is missing"};
  return j[key];
}

template <typename T>
T integer(const json& v, const std::string& path, T min = std::numeric_limits<T>::min(),
          T max = std::numeric_limits<T>::max()) {
  bool ok = false;
  T out{};
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    ok = std::in_range<T>(u);
    if (ok) out = static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    ok = std::in_range<T>(i);
    if (ok) out = static_cast<T>(i);
  } else {
    throw FieldError{fmt::format("{} must be an integer, not {}", path, shown(v))};
  }
  if (!ok || out < min || out > max) {
    throw FieldError{fmt::format("{}={} is outside [{}, {}]", path, shown(v), min, max)};
  }
  return out;
}

template <typename T>
T integer_field(const json& j, const std::string& path, const char* key,
                T min = std::numeric_limits<T>::min(), T max = std::numeric_limits<T>::max()) {
  return integer<T>(field(j, path, key), path.empty() ? key : path + "." + key, min, max);
}

double number_field(const json& j, const std::string& path, const char* key) {
  const json& v = field(j, path, key);
  if (!v.is_number())
    throw FieldError{fmt::format("{}.{} must be a number, not {}", path, key, shown(v))};
  return v.get<double>();
}

std::string string_field(const json& j, const std::string& path, const char* key) {
  const json& v = field(j, path, key);
  if (!v.is_string()) {
    throw FieldError{fmt::format("{}{}{} must be a string, not {}", path, path.empty() ? "" : ".",
                                 key, shown(v))};
  }
  return v.get<std::string>();
}

// A tensor's elements are bounded so that every byte count (elements x 4) fits in int64.
constexpr int64_t kMaxElements = int64_t{1} << 56;

Shape shape_field(const json& j, const std::string& path, const char* key) {
  const json& v = field(j, path, key);
  const std::string full = path + "." + key;
  if (!v.is_array()) throw FieldError{fmt::format("{} must be an array, not {}", full, shown(v))};
  Shape shape;
  int64_t n = 1;
  for (const json& d : v) {
    shape.push_back(integer<int64_t>(d, full, 0, kMaxElements));
    n = shape.back() == 0 || n > kMaxElements / shape.back() ? (shape.back() == 0 ? 0 : -1)
                                                             : n * shape.back();
    if (n < 0) throw FieldError{fmt::format("{}={} has more than 2^56 elements", full, shown(v))};
  }
  return shape;
}

const json& array_field(const json& j, const char* key) {
  const json& v = field(j, "", key);
  if (!v.is_array()) throw FieldError{fmt::format("{} must be an array, not {}", key, shown(v))};
  return v;
}

model::GptConfig model_config_fields(const json& j, const std::string& path) {
  model::GptConfig c;
  constexpr int kMax = std::numeric_limits<int>::max();
  c.name = string_field(j, path, "name");
  c.n_layer = integer_field<int>(j, path, "n_layer", 1, kMax);
  c.n_embd = integer_field<int>(j, path, "n_embd", 1, kMax);
  c.n_head = integer_field<int>(j, path, "n_head", 1, kMax);
  c.vocab_size = integer_field<int>(j, path, "vocab_size", 1, kMax);
  c.pad_vocab_to = integer_field<int>(j, path, "pad_vocab_to", 1, kMax);
  c.max_seq_len = integer_field<int>(j, path, "max_seq_len", 1, kMax);
  // The variant's choices (model/gpt_config.h), absent from checkpoints written before them:
  // those are GPT-2, the defaults.
  auto has = [&](const char* key) { return j.is_object() && j.contains(key); };
  auto choice = [&](const char* key, auto& out, std::initializer_list<const char*> names) {
    if (!has(key)) return;
    const std::string v = string_field(j, path, key);
    const auto it = std::ranges::find(names, v);
    if (it == names.end()) {
      throw FieldError{fmt::format("{}.{}={} is not one of {}", path, key, shown(j[key]),
                                   fmt::join(names, ", "))};
    }
    out = static_cast<std::remove_reference_t<decltype(out)>>(it - names.begin());
  };
  auto boolean = [&](const char* key, bool& out) {
    if (!has(key)) return;
    if (!j[key].is_boolean()) {
      throw FieldError{
          fmt::format("{}.{} must be true or false, not {}", path, key, shown(j[key]))};
    }
    out = j[key].get<bool>();
  };
  choice("position", c.position, {"learned", "rope"});
  choice("norm", c.norm, {"layernorm", "rmsnorm"});
  choice("mlp", c.mlp, {"gelu", "swiglu"});
  if (has("rope_theta")) c.rope_theta = static_cast<float>(number_field(j, path, "rope_theta"));
  if (has("norm_eps")) c.norm_eps = static_cast<float>(number_field(j, path, "norm_eps"));
  if (has("ffn_hidden_size")) c.ffn_hidden_size = integer_field<int>(j, path, "ffn_hidden_size", 0);
  if (has("n_kv_head")) c.n_kv_head = integer_field<int>(j, path, "n_kv_head", 0, kMax);
  boolean("tie_embeddings", c.tie_embeddings);
  boolean("bias", c.bias);
  return c;
}

// Version 1 recorded a slice of the global tensor; its writer only ever wrote whole tensors.
void v1_slice(const json& sh, const std::string& path, TensorInfo& ti) {
  const Shape start = shape_field(sh, path, "start"), shape = shape_field(sh, path, "shape");
  // (No Shape(n, 0) to compare with: GCC 12 takes its temporary for a heap misuse.)
  const bool at_origin =
      start.size() == shape.size() && std::ranges::all_of(start, [](int64_t s) { return s == 0; });
  if (shape != ti.global_shape || !at_origin) {
    throw FieldError{fmt::format("{}: a version 1 slice at {} of shape {} is not the whole {}",
                                 path, shape_str(start), shape_str(shape),
                                 shape_str(ti.global_shape))};
  }
  ti.count = numel(shape);
}

// Version 2: which tensor-parallel shard, and which of its elements.
void v2_piece(const json& tj, const std::string& path, TensorInfo& ti, Status& s,
              const std::string& origin) {
  const json& sh = field(tj, path, "tp_shard");
  const std::string sp = path + ".tp_shard";
  ti.split.dim = integer_field<int>(sh, sp, "dim", -1, 1);
  ti.split.blocks = integer_field<int>(sh, sp, "blocks", 1, 3);
  // The blocks' relative sizes (grouped-query attn.qkv), absent where they are equal.
  if (sh.is_object() && sh.contains("block_weights")) {
    const json& w = sh["block_weights"];
    if (!w.is_array() || w.size() != static_cast<size_t>(ti.split.blocks)) {
      throw FieldError{fmt::format("{}.block_weights must be {} integers, not {}", sp,
                                   ti.split.blocks, shown(w))};
    }
    for (size_t b = 0; b < w.size(); ++b) {
      ti.split.weights[b] = integer<int64_t>(w[b], sp + ".block_weights", 1, 1 << 24);
    }
  }
  ti.tp = integer_field<int>(sh, sp, "tp", 1, 1 << 24);
  ti.tp_rank = integer_field<int>(sh, sp, "rank", 0, ti.tp - 1);
  const Shape& g = ti.global_shape;
  int64_t parts = int64_t{ti.split.blocks} * ti.tp;
  if (ti.split.weights[0] != 0) {
    parts = 0;
    for (int b = 0; b < ti.split.blocks; ++b) parts += ti.split.weights[b] * ti.tp;
  }
  bool ok = true;
  if (ti.split.dim == 0) {
    ok = !g.empty() && g[0] % parts == 0;
  } else if (ti.split.dim == 1) {
    ok = g.size() == 2 && ti.split.blocks == 1 && g[1] % ti.tp == 0;
  } else {
    ok = ti.split.blocks == 1;
  }
  if (!ok) {
    s.add(fmt::format("{}: tensor {}: a {} split (dim {}, {} blocks) over tp={} does not divide {}",
                      origin, ti.name, ti.split.dim < 0 ? "replicated" : "tensor-parallel",
                      ti.split.dim, ti.split.blocks, ti.tp, shape_str(g)));
    return;
  }
  const json& e = field(tj, path, "elements");
  if (!e.is_array() || e.size() != 2) {
    throw FieldError{fmt::format("{}.elements must be [begin, count], not {}", path, shown(e))};
  }
  const int64_t local = numel(ti.shard_shape());
  ti.begin = integer<int64_t>(e[0], path + ".elements[0]", 0, local);
  ti.count = integer<int64_t>(e[1], path + ".elements[1]", 0, local - ti.begin);
}

RankFiles files_from_json(const json& j, const std::string& origin, int version, Status& s) {
  RankFiles f;
  std::map<std::string, int64_t> shard_bytes;
  for (const json& sj : array_field(j, "shards")) {
    ShardInfo sh;
    sh.file = string_field(sj, "shards[]", "file");
    sh.bytes = integer_field<int64_t>(sj, "shards[]", "bytes", 0);
    const std::string hex = string_field(sj, "shards[]", "xxh3");
    if (hex.empty() || hex.size() > 16 ||
        hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      s.add(fmt::format("{}: bad checksum '{}' of shard {}", origin, hex, sh.file));
    } else {
      sh.xxh3 = std::strtoull(hex.c_str(), nullptr, 16);
    }
    if (sh.file.empty() || sh.file.find('/') != std::string::npos || sh.file.starts_with(".")) {
      s.add(fmt::format("{}: shard file name '{}' is not a plain file name", origin, sh.file));
    }
    if (!shard_bytes.emplace(sh.file, sh.bytes).second) {
      s.add(fmt::format("{}: shard {} is listed twice", origin, sh.file));
    }
    f.shards.push_back(sh);
  }
  std::set<std::tuple<std::string, std::string, int, int, int64_t>> seen;
  for (const json& tj : array_field(j, "tensors")) {
    TensorInfo ti;
    ti.name = string_field(tj, "tensors[]", "name");
    const std::string path = "tensors[" + ti.name + "]";
    ti.group = string_field(tj, path, "group");
    ti.dtype = string_field(tj, path, "dtype");
    ti.global_shape = shape_field(tj, path, "global_shape");
    if (version == 1) {
      const json& sh = field(tj, path, "shard");
      ti.file = string_field(sh, path + ".shard", "file");
      ti.offset = integer_field<int64_t>(sh, path + ".shard", "offset", 0);
      v1_slice(sh, path + ".shard", ti);
    } else {
      ti.file = string_field(tj, path, "file");
      ti.offset = integer_field<int64_t>(tj, path, "offset", 0);
      v2_piece(tj, path, ti, s, origin);
    }
    auto it = shard_bytes.find(ti.file);
    if (std::find(std::begin(kStateGroups), std::end(kStateGroups), ti.group) ==
        std::end(kStateGroups)) {
      s.add(fmt::format("{}: tensor {} has group '{}', not params, adam_m or adam_v", origin,
                        ti.name, ti.group));
    } else if (!seen.emplace(ti.group, ti.name, ti.tp, ti.tp_rank, ti.begin).second) {
      s.add(fmt::format("{}: tensor {} ({}) is listed twice", origin, ti.name, ti.group));
    }
    if (ti.dtype != "f32") {
      s.add(fmt::format("{}: tensor {} has dtype {}; this build reads f32", origin, ti.name,
                        ti.dtype));
    } else if (it == shard_bytes.end()) {
      s.add(fmt::format("{}: tensor {} names shard {}, which is not listed", origin, ti.name,
                        ti.file));
    } else if (ti.offset > it->second || ti.count * 4 > it->second - ti.offset) {
      s.add(fmt::format("{}: tensor {} lies outside its shard {}", origin, ti.name, ti.file));
    }
    f.tensors.push_back(std::move(ti));
  }
  return f;
}

json files_to_json(const RankFiles& f) {
  json tensors = json::array();
  for (const auto& t : f.tensors) {
    json shard = {{"dim", t.split.dim},
                  {"blocks", t.split.blocks},
                  {"tp", t.tp},
                  {"rank", t.tp_rank},
                  {"shape", t.shard_shape()}};
    if (t.split.weights[0] != 0) {
      shard["block_weights"] =
          std::vector<int64_t>(t.split.weights, t.split.weights + t.split.blocks);
    }
    tensors.push_back({{"name", t.name},
                       {"group", t.group},
                       {"dtype", t.dtype},
                       {"global_shape", t.global_shape},
                       {"tp_shard", shard},
                       {"elements", {t.begin, t.count}},
                       {"file", t.file},
                       {"offset", t.offset}});
  }
  json shards = json::array();
  for (const auto& s : f.shards) {
    shards.push_back({{"file", s.file}, {"bytes", s.bytes}, {"xxh3", hex64(s.xxh3)}});
  }
  return {{"shards", shards}, {"tensors", tensors}};
}

// The metadata as written by metadata_to_json(); structural problems throw FieldError, the
// consistency of its parts is collected in s.
Metadata metadata_from_json(const json& j, const std::string& origin, Status& s) {
  Metadata m;
  if (!j.is_object() || !j.contains("format") || j["format"] != "weft-checkpoint") {
    s.add(fmt::format("{}: not a weft checkpoint (no \"format\": \"weft-checkpoint\")", origin));
    return m;
  }
  const int version = integer_field<int>(j, "", "version");
  if (version < 1 || version > kFormatVersion) {
    s.add(fmt::format("{}: checkpoint format version {}, this build reads versions 1 to {}", origin,
                      version, kFormatVersion));
    return m;
  }
  m.version = kFormatVersion;  // a version 1 checkpoint reads as the same pieces in version 2
  auto cfg = config_from_json(field(j, "", "model"), origin);
  if (!cfg.ok()) {
    s.merge(cfg.status());
  } else {
    m.model = cfg.value();
  }
  const json& p = field(j, "", "parallel");
  constexpr int kMaxRanks = 1 << 24;
  m.parallel.tp = integer_field<int>(p, "parallel", "tp", 1, kMaxRanks);
  m.parallel.pp = integer_field<int>(p, "parallel", "pp", 1, kMaxRanks);
  m.parallel.dp = integer_field<int>(p, "parallel", "dp", 1, kMaxRanks);
  if (p.contains("vp")) m.parallel.vp = integer_field<int>(p, "parallel", "vp", 1, kMaxRanks);
  if (p.contains("zero")) m.parallel.zero = integer_field<int>(p, "parallel", "zero", 0, 3);
  const json& t = field(j, "", "train");
  m.train.step = integer_field<int64_t>(t, "train", "step", 0);
  m.train.seed = integer_field<uint64_t>(t, "train", "seed");
  const json& sampler = field(t, "train", "sampler");
  m.train.sampler_epoch = integer_field<int64_t>(sampler, "train.sampler", "epoch", 0);
  m.train.sampler_position = integer_field<int64_t>(sampler, "train.sampler", "position", 0);
  const json& lr = field(t, "train", "lr_schedule");
  m.train.lr_schedule.kind = string_field(lr, "train.lr_schedule", "kind");
  m.train.lr_schedule.lr = number_field(lr, "train.lr_schedule", "lr");
  m.train.lr_schedule.min_lr = number_field(lr, "train.lr_schedule", "min_lr");
  m.train.lr_schedule.warmup_steps =
      integer_field<int64_t>(lr, "train.lr_schedule", "warmup_steps", 0);
  m.train.lr_schedule.total_steps =
      integer_field<int64_t>(lr, "train.lr_schedule", "total_steps", 0);
  m.train.tokenizer = string_field(t, "train", "tokenizer");
  if (t.contains("tokenizer_identity")) {
    m.train.tokenizer_identity = string_field(t, "train", "tokenizer_identity");
  }
  m.train.data_path = string_field(t, "train", "data");
  if (j.contains("run_config")) m.train.run_config = j["run_config"];
  if (j.contains("optimizer")) {
    const json& o = j["optimizer"];
    const std::string kind = string_field(o, "optimizer", "kind");
    if (kind != "adamw") s.add(fmt::format("{}: unknown optimizer '{}'", origin, kind));
    m.has_optimizer = true;
    // AdamW counts steps in an int.
    m.optimizer_step =
        integer_field<int64_t>(o, "optimizer", "step", 0, std::numeric_limits<int>::max());
    m.adamw.beta1 = static_cast<float>(number_field(o, "optimizer", "beta1"));
    m.adamw.beta2 = static_cast<float>(number_field(o, "optimizer", "beta2"));
    m.adamw.eps = static_cast<float>(number_field(o, "optimizer", "eps"));
    m.adamw.weight_decay = static_cast<float>(number_field(o, "optimizer", "weight_decay"));
  }
  RankFiles files = files_from_json(j, origin, version, s);
  m.shards = std::move(files.shards);
  m.tensors = std::move(files.tensors);
  return m;
}

}  // namespace

nlohmann::json metadata_to_json(const Metadata& m) {
  json files = files_to_json({m.shards, m.tensors});
  const auto& p = m.parallel;
  const auto& tr = m.train;
  json j = {
      {"format", "weft-checkpoint"},
      {"version", m.version},
      {"model", config_to_json(m.model)},
      {"parallel", {{"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp}, {"vp", p.vp}, {"zero", p.zero}}},
      {"train",
       {{"step", tr.step},
        {"seed", tr.seed},
        {"sampler", {{"epoch", tr.sampler_epoch}, {"position", tr.sampler_position}}},
        {"lr_schedule",
         {{"kind", tr.lr_schedule.kind},
          {"lr", tr.lr_schedule.lr},
          {"min_lr", tr.lr_schedule.min_lr},
          {"warmup_steps", tr.lr_schedule.warmup_steps},
          {"total_steps", tr.lr_schedule.total_steps}}},
        {"tokenizer", tr.tokenizer},
        {"tokenizer_identity", tr.tokenizer_identity},
        {"data", tr.data_path}}},
      {"run_config", tr.run_config},
      {"shards", files["shards"]},
      {"tensors", files["tensors"]},
  };
  if (m.has_optimizer) {
    j["optimizer"] = {{"kind", "adamw"},        {"step", m.optimizer_step},
                      {"beta1", m.adamw.beta1}, {"beta2", m.adamw.beta2},
                      {"eps", m.adamw.eps},     {"weight_decay", m.adamw.weight_decay}};
  }
  return j;
}

nlohmann::json config_to_json(const model::GptConfig& c) {
  return {{"name", c.name},
          {"n_layer", c.n_layer},
          {"n_embd", c.n_embd},
          {"n_head", c.n_head},
          {"vocab_size", c.vocab_size},
          {"pad_vocab_to", c.pad_vocab_to},
          {"max_seq_len", c.max_seq_len},
          {"position", model::position_name(c.position)},
          {"rope_theta", c.rope_theta},
          {"norm", model::norm_name(c.norm)},
          {"norm_eps", c.norm_eps},
          {"mlp", model::mlp_name(c.mlp)},
          {"ffn_hidden_size", c.ffn_hidden_size},
          {"n_kv_head", c.n_kv_head},
          {"tie_embeddings", c.tie_embeddings},
          {"bias", c.bias}};
}

Result<model::GptConfig> config_from_json(const nlohmann::json& j, const std::string& origin) {
  model::GptConfig c;
  try {
    c = model_config_fields(j, "model");
  } catch (const FieldError& e) {
    return Status::error(fmt::format("{}: bad model config: {}", origin, e.message));
  }
  if (Status s = model::validate(c); !s.ok()) return s.prefixed(origin + ": model");
  return c;
}

namespace {

// parse(json, problems) on the text; malformed JSON and fields of the wrong type or range become
// one error "<origin>: <what><message>".
template <typename T, typename Parse>
Result<T> parse_checked(std::string_view text, const std::string& origin, const char* what,
                        Parse parse) {
  Status s;
  T out;
  try {
    out = parse(json::parse(text), s);
  } catch (const json::exception& e) {
    return Status::error(fmt::format("{}: {}{}", origin, what, e.what()));
  } catch (const FieldError& e) {
    return Status::error(fmt::format("{}: {}{}", origin, what, e.message));
  }
  if (!s.ok()) return s;
  return out;
}

}  // namespace

std::string rank_files_to_json(const RankFiles& f) { return files_to_json(f).dump(); }

Result<RankFiles> rank_files_from_json(std::string_view text) {
  const std::string origin = "a rank's checkpoint files";
  return parse_checked<RankFiles>(text, origin, "", [&](const json& j, Status& s) {
    return files_from_json(j, origin, kFormatVersion, s);
  });
}

Result<Metadata> parse_metadata(std::string_view text, std::string_view origin) {
  const std::string where(origin);
  return parse_checked<Metadata>(text, where,
                                 "corrupt checkpoint metadata: ", [&](const json& j, Status& s) {
                                   return metadata_from_json(j, where, s);
                                 });
}

}  // namespace weft::checkpoint
