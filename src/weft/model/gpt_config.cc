#include "weft/model/gpt_config.h"

#include <fmt/format.h>

#include <algorithm>

#include <toml++/toml.h>
#include <fstream>
#include <sstream>

#include "weft/core/suggest.h"

namespace weft::model {

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

Result<GptConfig> parse_gpt_config(const std::string& text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return Status::error(fmt::format("{}: TOML syntax error at line {}: {}", origin,
                                     e.source().begin.line, e.description()));
  }
  const toml::table* t = root["model"].as_table();
  if (t == nullptr) return Status::error(fmt::format("{}: missing [model] table", origin));

  GptConfig c;
  Status s;                 // every problem, reported together
  bool incomplete = false;  // a key is missing or mistyped: range checks would only repeat it
  const std::vector<std::string> known = {"name",       "n_layer",      "n_embd",     "n_head",
                                          "vocab_size", "pad_vocab_to", "max_seq_len"};
  for (const auto& [key, node] : *t) {
    std::string k(key.str());
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      s.add(fmt::format("unknown key model.{}{}", k, did_you_mean(k, known)));
    }
  }
  auto get_int = [&](const char* key, int& out) {
    auto node = (*t)[key];
    if (!node) {
      if (out == 0) {
        s.add(fmt::format("missing key model.{}", key));
        incomplete = true;
      }
      return;
    }
    if (auto v = node.value<int64_t>()) {
      out = static_cast<int>(*v);
    } else {
      s.add(fmt::format("model.{} must be an integer", key));
      incomplete = true;
    }
  };
  if (auto v = (*t)["name"].value<std::string>()) c.name = *v;
  get_int("n_layer", c.n_layer);
  get_int("n_embd", c.n_embd);
  get_int("n_head", c.n_head);
  get_int("vocab_size", c.vocab_size);
  get_int("pad_vocab_to", c.pad_vocab_to);
  get_int("max_seq_len", c.max_seq_len);
  if (!incomplete) s.merge(validate(c));
  if (!s.ok()) {
    Status out;
    for (const auto& p : s.problems()) out.add(origin + ": " + p);
    return out;
  }
  return c;
}

Result<GptConfig> load_gpt_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::error(fmt::format("{}: cannot open model config", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_gpt_config(ss.str(), path);
}

}  // namespace weft::model
