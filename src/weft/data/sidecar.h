#pragma once
// The sidecar PREFIX.json that `weft preprocess` writes next to a dataset:
//   {"tokenizer": "gpt2", "vocab_size": 50257, "eod": 50256, "documents": 6, "tokens": 1200000,
//    "source": "corpus.jsonl"}
// It records which tokenizer made the ids, so the trainer can check that data, tokenizer and model
// agree before it allocates anything (docs/formats.md).

#include <cstdint>
#include <optional>
#include <string>

#include "weft/core/status.h"
#include "weft/data/file_io.h"

namespace weft::data {

struct Sidecar {
  std::string tokenizer;  // BpeTokenizer::identity(): "gpt2" or a tokenizer directory
  int vocab_size = 0;
  int32_t eod = -1;
  int64_t documents = 0;
  int64_t tokens = 0;
  std::string source;  // the input preprocess read
  std::string path;    // where this sidecar was read from (not serialized)
};

std::string sidecar_json(const Sidecar& sidecar);

// Reads PATH when it exists; nullopt when it does not; an error naming PATH when it is unreadable,
// not JSON, or lacks a field.
Result<std::optional<Sidecar>> read_sidecar(const std::string& path);

// Checks a sidecar against the data it describes: token and document counts, and that the stored
// token type can hold every id of the vocabulary. `data_path` names the data file in messages.
Status check_sidecar(const Sidecar& sidecar, const std::string& data_path, int64_t num_tokens,
                     int64_t num_documents, TokenType stored);

}  // namespace weft::data
