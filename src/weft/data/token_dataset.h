#pragma once
// A tokenized corpus as the trainer sees it: one flat stream of token ids (documents concatenated,
// each followed by the end-of-document token), read by offset. Backed by a Megatron .bin/.idx
// pair (indexed_dataset.h) or an llm.c token file (llmc_dataset.h); both are memory-mapped and read
// as they are, so a dataset larger than memory streams from the page cache.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/status.h"
#include "weft/data/file_io.h"
#include "weft/data/sidecar.h"

namespace weft::data {

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t num_tokens() const = 0;
  virtual int64_t num_documents() const = 0;
  // Copies tokens [offset, offset + n) of the stream into out (widening to int32).
  virtual void read(int64_t offset, int64_t n, int32_t* out) const = 0;
  // Vocabulary size and tokenizer identity recorded next to the data by `weft preprocess`
  // (PREFIX.json), when present; the trainer checks them against the model and the tokenizer.
  virtual std::optional<int> vocab_size() const = 0;
  // BpeTokenizer::identity() of the tokenizer that made the ids ("gpt2", "bpe-<vocab>-<hash>"),
  // or "" when unknown.
  virtual std::string tokenizer() const = 0;
  virtual std::string describe() const = 0;  // "megatron mmididx v1, uint16, 1.2M tokens, 6 docs"
  // Whether the ids' vocabulary is recorded beside the data (weft's sidecar), so that the ids need
  // no scan (data/token_scan.h); in-memory datasets say so by returning a vocab_size().
  virtual bool ids_recorded() const { return vocab_size().has_value(); }
  // The least and largest stored id of tokens [offset, offset + n), n > 0, with no vocabulary
  // check (read() throws on an id outside the recorded vocabulary; a scan must see it).
  virtual std::pair<int64_t, int64_t> id_min_max(int64_t offset, int64_t n) const;
  // The files the tokens are read from (for token_scan.h's cache key); none for in-memory data.
  virtual std::vector<std::string> files() const { return {}; }
};

// What both file formats are: num_tokens() ids of one type back to back from a byte of a
// memory-mapped file, and the sidecar (PREFIX.json), when there is one, checked against them.
class MappedTokenDataset : public TokenDataset {
 public:
  int64_t num_tokens() const override { return num_tokens_; }
  int64_t num_documents() const override { return num_documents_; }
  std::optional<int> vocab_size() const override {
    return sidecar_ ? sidecar_->vocab_size : assumed_vocab_size_;
  }
  std::string tokenizer() const override {
    return sidecar_ ? sidecar_->tokenizer : assumed_tokenizer_;
  }
  // Throws for an id outside the vocabulary: vocab_size(), else int32's range.
  void read(int64_t offset, int64_t n, int32_t* out) const override;
  std::pair<int64_t, int64_t> id_min_max(int64_t offset, int64_t n) const override;

 protected:
  MappedTokenDataset(MappedFile file, int64_t first_byte)
      : file_(std::move(file)), first_byte_(first_byte) {}
  // Keeps `sidecar` once check_sidecar() passes (`data_path` names the data in its messages).
  Status set_sidecar(std::optional<Sidecar> sidecar, const std::string& data_path);

  MappedFile file_;
  int64_t first_byte_ = 0;  // the first token's
  TokenType type_ = TokenType::U16;
  int64_t num_tokens_ = 0, num_documents_ = 0;
  std::optional<Sidecar> sidecar_;
  // What the data is taken to be without a sidecar (llm.c's: GPT-2's tokens); assumed_vocab_
  // ends read()'s error: "" or " of <the vocabulary>".
  std::optional<int> assumed_vocab_size_;
  std::string assumed_tokenizer_, assumed_vocab_;
};

// Opens PATH by its format: PREFIX (with PREFIX.bin + PREFIX.idx), PREFIX.bin/.idx, or an llm.c
// .bin (magic 20240520). Every problem is named with the file.
Result<std::unique_ptr<TokenDataset>> open_token_dataset(const std::string& path);

// Checks that data (opened from data_path), tokenizer and model agree on the vocabulary: the
// dataset's and the tokenizer's ids must fit the model's vocab_size, and the dataset must have
// been made by the same tokenizer. Unknown facts (no sidecar, tokenizer_identity "",
// tokenizer_vocab_size 0) are not checked. Every mismatch is reported, naming the files.
Status check_vocabulary(const TokenDataset& data, const std::string& data_path,
                        int model_vocab_size, const std::string& tokenizer_identity = "",
                        int tokenizer_vocab_size = 0);

}  // namespace weft::data
