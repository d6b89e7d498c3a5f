#include "weft/data/sidecar.h"

#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace weft::data {

std::string sidecar_json(const Sidecar& s) {
  // ordered_json keeps the documented field order, which makes the file pleasant to read
  nlohmann::ordered_json j = {
      {"tokenizer", s.tokenizer}, {"vocab_size", s.vocab_size}, {"eod", s.eod},
      {"documents", s.documents}, {"tokens", s.tokens},         {"source", s.source}};
  return j.dump(2) + "\n";
}

Result<std::optional<Sidecar>> read_sidecar(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<Sidecar>{};
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(path + ": cannot open: " + errno_text());
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    return Status::error(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) return Status::error(path + ": expected a JSON object");
  Status status;
  Sidecar s;
  s.path = path;
  auto field = [&](const char* key, auto& out, bool is_string) {
    auto it = j.find(key);
    if (it == j.end()) {
      status.add(fmt::format("{}: missing field \"{}\"", path, key));
    } else if (is_string ? !it->is_string() : !it->is_number_integer()) {
      status.add(fmt::format("{}: field \"{}\" must be {}, not {}", path, key,
                             is_string ? "a string" : "an integer", it->dump()));
    } else {
      it->get_to(out);
    }
  };
  field("tokenizer", s.tokenizer, true);
  field("vocab_size", s.vocab_size, false);
  field("eod", s.eod, false);
  field("documents", s.documents, false);
  field("tokens", s.tokens, false);
  if (j.contains("source") && j["source"].is_string()) s.source = j["source"];
  if (!status.ok()) return status;
  if (s.vocab_size <= 0)
    status.add(fmt::format("{}: vocab_size={} must be > 0", path, s.vocab_size));
  if (s.eod < 0 || s.eod >= s.vocab_size) {
    status.add(
        fmt::format("{}: eod={} is outside the vocabulary [0, {})", path, s.eod, s.vocab_size));
  }
  if (!status.ok()) return status;
  return std::optional<Sidecar>{std::move(s)};
}

Status check_sidecar(const Sidecar& s, const std::string& data_path, int64_t num_tokens,
                     int64_t num_documents, TokenType stored) {
  Status status;
  if (s.tokens != num_tokens || s.documents != num_documents) {
    status.add(fmt::format(
        "{} describes {} tokens in {} documents but {} holds {} tokens in {} documents: the "
        "sidecar belongs to another dataset",
        s.path, s.tokens, s.documents, data_path, num_tokens, num_documents));
  }
  if (s.vocab_size - 1 > token_type_max(stored)) {
    status.add(fmt::format(
        "vocabulary mismatch: {} says vocab_size={} but {} stores {} tokens (ids up to {})", s.path,
        s.vocab_size, data_path, token_type_name(stored), token_type_max(stored)));
  }
  return status;
}

}  // namespace weft::data
