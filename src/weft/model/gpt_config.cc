#include "weft/model/gpt_config.h"

#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "weft/core/text_file.h"
#include "weft/core/toml_reader.h"
#include "weft/core/weft_files.h"

namespace weft::model {

const char* position_name(Position p) { return p == Position::Rope ? "rope" : "learned"; }
const char* norm_name(NormKind n) { return n == NormKind::RMSNorm ? "rmsnorm" : "layernorm"; }
const char* mlp_name(MlpKind m) { return m == MlpKind::SwiGLU ? "swiglu" : "gelu"; }

Status validate(const GptConfig& c) {
  Status s;
  auto positive = [&](const char* key, int v) {
    if (v <= 0) s.add(fmt::format("{}={} must be > 0", key, v));
  };
  positive("n_layer", c.n_layer);
  positive("n_embd", c.n_embd);
  positive("n_head", c.n_head);
  positive("vocab_size", c.vocab_size);
  positive("pad_vocab_to", c.pad_vocab_to);
  positive("max_seq_len", c.max_seq_len);
  if (c.n_embd > 0 && c.n_head > 0 && c.n_embd % c.n_head != 0) {
    s.add(fmt::format("n_embd={} is not divisible by n_head={}", c.n_embd, c.n_head));
  }
  if (c.n_kv_head < 0) s.add(fmt::format("n_kv_head={} must be >= 0 (0: n_head)", c.n_kv_head));
  if (c.n_kv_head > 0 && c.n_head > 0 && c.n_head % c.n_kv_head != 0) {
    s.add(
        fmt::format("n_head={} is not a multiple of n_kv_head={} (each key/value head serves a "
                    "group of query heads)",
                    c.n_head, c.n_kv_head));
  }
  if (c.ffn_hidden_size < 0) {
    s.add(fmt::format("ffn_hidden_size={} must be >= 0 (0: 4*n_embd)", c.ffn_hidden_size));
  }
  if (!(c.norm_eps > 0.0f)) s.add(fmt::format("norm_eps={} must be > 0", c.norm_eps));
  if (c.rope() && !(c.rope_theta > 1.0f)) {
    s.add(fmt::format("rope_theta={} must be > 1", c.rope_theta));
  }
  if (c.rope() && c.n_embd > 0 && c.n_head > 0 && c.n_embd % c.n_head == 0 &&
      c.head_size() % 2 != 0) {
    s.add(
        fmt::format("position=rope rotates pairs of a head's elements: the head size {} "
                    "(n_embd/n_head) must be even",
                    c.head_size()));
  }
  // Sizes the code computes in int (the padded vocabulary, the MLP's 4C, 3C of qkv) must fit one,
  // and the parameter count an int64 (found by fuzzing parse_gpt_config: vocab_size=2^31-1
  // overflowed padded_vocab()).
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (c.vocab_size > 0 && c.pad_vocab_to > 0 &&
      int64_t{c.vocab_size} + c.pad_vocab_to - 1 > kIntMax) {
    s.add(fmt::format("vocab_size={} rounded up to pad_vocab_to={} exceeds {}", c.vocab_size,
                      c.pad_vocab_to, kIntMax));
  }
  if (c.n_embd > kIntMax / 4)
    s.add(fmt::format("n_embd={} exceeds {} (4*n_embd must fit an int)", c.n_embd, kIntMax / 4));
  if (c.ffn_hidden_size > kIntMax / 2) {
    s.add(fmt::format("ffn_hidden_size={} exceeds {} (2*ffn_hidden_size must fit an int)",
                      c.ffn_hidden_size, kIntMax / 2));
  }
  if (s.ok()) {
    const auto C = static_cast<double>(c.n_embd);
    const double layer = C * static_cast<double>(c.qkv_width()) + C * C +
                         C * static_cast<double>(c.fc_width() + c.ffn());
    const double params = static_cast<double>(c.n_layer) * layer +
                          static_cast<double>(int64_t{c.padded_vocab()} + c.max_seq_len) * C * 2;
    if (params > 0x1p62) {
      s.add(fmt::format("n_layer={} and n_embd={} make {:.3g} parameters, more than 2^62",
                        c.n_layer, c.n_embd, params));
    }
  }
  return s;
}

Status validate_for_run(const GptConfig& c, int seq_len) {
  Status s = validate(c);
  if (seq_len <= 0) s.add(fmt::format("sequence length {} must be > 0", seq_len));
  if (c.max_seq_len > 0 && seq_len > c.max_seq_len) {
    s.add(fmt::format("sequence length {} is larger than the position table (max_seq_len={})",
                      seq_len, c.max_seq_len));
  }
  return s;
}

Status validate_tensor_parallel(const GptConfig& c, int tp, bool sequence_parallel, int B, int T) {
  Status s;
  if (tp < 1) return Status::error(fmt::format("parallel.tp={} must be >= 1", tp));
  if (c.n_head > 0 && c.n_head % tp != 0) {
    s.add(fmt::format("n_head={} is not divisible by tp={} (each rank computes whole heads)",
                      c.n_head, tp));
  }
  if (c.n_embd > 0 && c.n_embd % tp != 0) {
    s.add(fmt::format("n_embd={} is not divisible by tp={}", c.n_embd, tp));
  }
  // Key/value heads are split like the query heads (Megatron-Core; no replication).
  if (c.n_kv_head > 0 && c.n_kv_head % tp != 0) {
    s.add(
        fmt::format("n_kv_head={} is not divisible by tp={} (each rank computes whole key/value "
                    "heads; choose tp dividing n_kv_head)",
                    c.n_kv_head, tp));
  }
  if (c.ffn_hidden_size > 0 && c.ffn_hidden_size % tp != 0) {
    s.add(fmt::format("ffn_hidden_size={} is not divisible by tp={}", c.ffn_hidden_size, tp));
  }
  if (c.vocab_size > 0 && c.pad_vocab_to > 0 && c.padded_vocab() % tp != 0) {
    s.add(fmt::format(
        "the padded vocabulary {} (vocab_size={} rounded up to pad_vocab_to={}) is not divisible "
        "by tp={}: set pad_vocab_to to a multiple of {}",
        c.padded_vocab(), c.vocab_size, c.pad_vocab_to, tp, tp));
  }
  if (sequence_parallel && B > 0 && T > 0 && (int64_t{B} * T) % tp != 0) {
    s.add(
        fmt::format("sequence parallelism splits the {}x{} = {} tokens of a microbatch across "
                    "tp={} ranks: they must divide",
                    B, T, int64_t{B} * T, tp));
  }
  return s;
}

Result<GptConfig> parse_gpt_config(const std::string& text, const std::string& origin) {
  auto root = parse_toml(text, origin);
  if (!root.ok()) return root.status();
  const toml::table* t = root.value()["model"].as_table();
  if (t == nullptr) return Status::error(fmt::format("{}: missing [model] table", origin));

  GptConfig c;
  Status s;  // every problem, reported together
  TomlReader r(t, "model", s);
  r.known({"name", "n_layer", "n_embd", "n_head", "vocab_size", "pad_vocab_to", "max_seq_len",
           "position", "norm", "mlp", "rope_theta", "norm_eps", "ffn_hidden_size", "n_kv_head",
           "tie_embeddings", "bias"});
  r.report_unknown();
  const size_t unknown = s.problems().size();
  // A name of another type is left at the default, as it always was.
  if (auto v = (*t)["name"].value<std::string>()) c.name = *v;
  c.n_layer = r.get("n_layer", c.n_layer, true);
  c.n_embd = r.get("n_embd", c.n_embd, true);
  c.n_head = r.get("n_head", c.n_head, true);
  c.vocab_size = r.get("vocab_size", c.vocab_size, true);
  c.pad_vocab_to = r.get("pad_vocab_to", c.pad_vocab_to);
  c.max_seq_len = r.get("max_seq_len", c.max_seq_len, true);
  // A choice among names: "<key> must be one of a, b", with the value given.
  auto choice = [&](const char* key, auto& out, std::initializer_list<const char*> names) {
    std::string v;
    if (!read_toml(t->get(key), std::string("model.") + key, v, s) || v.empty()) return;
    const auto it = std::ranges::find(names, v);
    if (it == names.end()) {
      s.add(fmt::format("model.{}=\"{}\" must be one of {}", key, v, fmt::join(names, ", ")));
    } else {
      out = static_cast<std::remove_reference_t<decltype(out)>>(it - names.begin());
    }
  };
  choice("position", c.position, {"learned", "rope"});
  choice("norm", c.norm, {"layernorm", "rmsnorm"});
  choice("mlp", c.mlp, {"gelu", "swiglu"});
  c.rope_theta = static_cast<float>(r.get("rope_theta", double{c.rope_theta}));
  c.norm_eps = static_cast<float>(r.get("norm_eps", double{c.norm_eps}));
  c.ffn_hidden_size = r.get("ffn_hidden_size", c.ffn_hidden_size);
  c.n_kv_head = r.get("n_kv_head", c.n_kv_head);
  c.tie_embeddings = r.get("tie_embeddings", c.tie_embeddings);
  c.bias = r.get("bias", c.bias);
  // A key missing or mistyped: the range checks would only repeat it.
  if (s.problems().size() == unknown) s.merge(validate(c));
  if (!s.ok()) return s.prefixed(origin);
  return c;
}

Result<GptConfig> load_gpt_config(const std::string& path) {
  const auto text = read_text_file(find_weft_file(path));
  if (!text) return Status::error(fmt::format("{}: cannot open model config", path));
  return parse_gpt_config(*text, path);
}

}  // namespace weft::model
