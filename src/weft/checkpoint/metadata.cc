#include "weft/checkpoint/checkpoint.h"

// metadata.json: Metadata to JSON and back, every field checked for its type and range (the text
// is user input: it may be damaged, or of another program). Kept apart from checkpoint.cc's file
// I/O so the parser can be fuzzed on its own (tests/fuzz/checkpoint_metadata_fuzz.cc).

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <utility>

namespace weft::checkpoint {
using nlohmann::json;

namespace {

constexpr const char* kGroups[] = {"params", "adam_m", "adam_v"};

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

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
  return c;
}

// The metadata as written by metadata_to_json(); structural problems throw FieldError, the
// consistency of its parts is collected in s.
Metadata metadata_from_json(const json& j, const std::string& origin, Status& s) {
  Metadata m;
  if (!j.is_object() || !j.contains("format") || j["format"] != "weft-checkpoint") {
    s.add(fmt::format("{}: not a weft checkpoint (no \"format\": \"weft-checkpoint\")", origin));
    return m;
  }
  m.version = integer_field<int>(j, "", "version");
  if (m.version != kFormatVersion) {
    s.add(fmt::format("{}: checkpoint format version {}, this build reads version {}", origin,
                      m.version, kFormatVersion));
    return m;
  }
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
  if (p.contains("rank")) {
    const json& r = p["rank"];
    m.parallel.tp_rank = integer_field<int>(r, "parallel.rank", "tp", 0, m.parallel.tp - 1);
    m.parallel.pp_rank = integer_field<int>(r, "parallel.rank", "pp", 0, m.parallel.pp - 1);
    m.parallel.dp_rank = integer_field<int>(r, "parallel.rank", "dp", 0, m.parallel.dp - 1);
  }
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
    m.shards.push_back(sh);
  }
  std::set<std::pair<std::string, std::string>> names;
  for (const json& tj : array_field(j, "tensors")) {
    TensorInfo ti;
    ti.name = string_field(tj, "tensors[]", "name");
    const std::string path = "tensors[" + ti.name + "]";
    ti.group = string_field(tj, path, "group");
    ti.dtype = string_field(tj, path, "dtype");
    ti.global_shape = shape_field(tj, path, "global_shape");
    const json& sh = field(tj, path, "shard");
    ti.file = string_field(sh, path + ".shard", "file");
    ti.offset = integer_field<int64_t>(sh, path + ".shard", "offset", 0);
    ti.start = shape_field(sh, path + ".shard", "start");
    ti.shape = shape_field(sh, path + ".shard", "shape");
    auto it = shard_bytes.find(ti.file);
    bool inside =
        ti.start.size() == ti.global_shape.size() && ti.shape.size() == ti.global_shape.size();
    for (size_t d = 0; inside && d < ti.shape.size(); ++d) {
      inside = ti.start[d] <= ti.global_shape[d] - ti.shape[d];
    }
    if (std::find(std::begin(kGroups), std::end(kGroups), ti.group) == std::end(kGroups)) {
      s.add(fmt::format("{}: tensor {} has group '{}', not params, adam_m or adam_v", origin,
                        ti.name, ti.group));
    } else if (!names.emplace(ti.group, ti.name).second) {
      s.add(fmt::format("{}: tensor {} ({}) is listed twice", origin, ti.name, ti.group));
    }
    if (!inside) {
      s.add(fmt::format("{}: tensor {}: the slice at {} of shape {} is not inside {}", origin,
                        ti.name, shape_str(ti.start), shape_str(ti.shape),
                        shape_str(ti.global_shape)));
    }
    if (ti.dtype != "f32") {
      s.add(fmt::format("{}: tensor {} has dtype {}; this build reads f32", origin, ti.name,
                        ti.dtype));
    } else if (it == shard_bytes.end()) {
      s.add(fmt::format("{}: tensor {} names shard {}, which is not listed", origin, ti.name,
                        ti.file));
    } else if (ti.offset > it->second || numel(ti.shape) * 4 > it->second - ti.offset) {
      s.add(fmt::format("{}: tensor {} lies outside its shard {}", origin, ti.name, ti.file));
    }
    m.tensors.push_back(std::move(ti));
  }
  return m;
}

}  // namespace

nlohmann::json metadata_to_json(const Metadata& m) {
  json tensors = json::array();
  for (const auto& t : m.tensors) {
    tensors.push_back(
        {{"name", t.name},
         {"group", t.group},
         {"dtype", t.dtype},
         {"global_shape", t.global_shape},
         {"shard",
          {{"file", t.file}, {"offset", t.offset}, {"start", t.start}, {"shape", t.shape}}}});
  }
  json shards = json::array();
  for (const auto& s : m.shards) {
    shards.push_back({{"file", s.file}, {"bytes", s.bytes}, {"xxh3", hex64(s.xxh3)}});
  }
  const auto& p = m.parallel;
  const auto& tr = m.train;
  json j = {
      {"format", "weft-checkpoint"},
      {"version", m.version},
      {"model", config_to_json(m.model)},
      {"parallel",
       {{"tp", p.tp},
        {"pp", p.pp},
        {"dp", p.dp},
        {"vp", p.vp},
        {"zero", p.zero},
        {"rank", {{"tp", p.tp_rank}, {"pp", p.pp_rank}, {"dp", p.dp_rank}}}}},
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
      {"shards", shards},
      {"tensors", tensors},
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
          {"max_seq_len", c.max_seq_len}};
}

Result<model::GptConfig> config_from_json(const nlohmann::json& j, const std::string& origin) {
  model::GptConfig c;
  try {
    c = model_config_fields(j, "model");
  } catch (const FieldError& e) {
    return Status::error(fmt::format("{}: bad model config: {}", origin, e.message));
  }
  Status s = model::validate(c);
  if (!s.ok()) {
    Status out;
    for (const auto& p : s.problems()) out.add(origin + ": model: " + p);
    return out;
  }
  return c;
}

Result<Metadata> parse_metadata(std::string_view text, std::string_view origin) {
  const std::string where(origin);
  Status s;
  Metadata m;
  try {
    const json j = json::parse(text);
    m = metadata_from_json(j, where, s);
  } catch (const json::exception& e) {
    return Status::error(fmt::format("{}: corrupt checkpoint metadata: {}", where, e.what()));
  } catch (const FieldError& e) {
    return Status::error(fmt::format("{}: corrupt checkpoint metadata: {}", where, e.message));
  }
  if (!s.ok()) return s;
  return m;
}

}  // namespace weft::checkpoint
