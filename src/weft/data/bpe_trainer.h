#pragma once
// Byte-level BPE training (Sennrich et al. 2016, on bytes as in Radford et al. 2019): learn
// merges from a corpus and write them in GPT-2's format (encoder.json + vocab.bpe), which
// BpeTokenizer::load reads.
//
// The corpus is cut with GPT-2's pre-tokenization regex (Pretokenizer) and only the distinct
// pieces and their counts are kept. Ids 0..255 are the byte tokens in GPT-2's order (that of
// bytes_to_unicode, so a trained encoder.json starts like GPT-2's); each merge of the most
// frequent adjacent pair adds one token; <|endoftext|> is the last id. Pair counts are updated
// incrementally: a merge revisits only the distinct pieces that hold the merged pair.
// Ties (equal counts) go to the pair whose left token's bytes, then right token's bytes, are
// smallest, so the result depends only on the corpus and the vocabulary size. A merge whose
// result is already a token (reached by another split) is listed but adds no id.

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weft/core/status.h"
#include "weft/data/bpe_tokenizer.h"

namespace weft::data {

// Distinct pre-tokenized pieces of a corpus and how often each occurs.
class BpeWordCounts {
 public:
  void add_text(std::string_view text);
  Status add_file(const std::string& path);  // errors name the file
  int64_t bytes() const { return bytes_; }
  int64_t pieces() const { return pieces_; }
  const std::unordered_map<std::string, int64_t>& counts() const { return counts_; }

 private:
  Pretokenizer pretokenizer_;
  std::unordered_map<std::string, int64_t> counts_;
  int64_t bytes_ = 0, pieces_ = 0;
};

// A vocabulary in GPT-2's terms: token strings in the byte-level alphabet, by id, and the merges
// in priority order (both strings of a merge and their concatenation are tokens).
struct BpeVocab {
  std::vector<std::string> tokens;
  std::vector<std::array<std::string, 2>> merges;
};

struct BpeTrainOptions {
  int vocab_size = 0;  // all tokens: 256 bytes + merges + <|endoftext|>
  // Receives a line now and then ("merge 1200/3743: 'Ġthe' count 5123").
  std::function<void(const std::string&)> progress;
};

// The checks train_bpe makes before it starts (so a CLI can fail before reading a corpus).
Status check_bpe_train_options(const BpeTrainOptions& options);

// Learns options.vocab_size - 257 merges. Fails when vocab_size < 257 or when the corpus runs
// out of pairs to merge first (it names how many it could learn).
Result<BpeVocab> train_bpe(const BpeWordCounts& words, const BpeTrainOptions& options);

// encoder.json exactly as GPT-2's (Python's json.dumps: `{"!": 0, "\u0120t": 262, ...}`) and
// vocab.bpe ("#version: 0.2" then "LEFT RIGHT" per line).
std::string format_encoder_json(const BpeVocab& vocab);
std::string format_vocab_bpe(const BpeVocab& vocab);
// Writes DIR/encoder.json and DIR/vocab.bpe, creating DIR if needed.
Status write_bpe_files(const BpeVocab& vocab, const std::string& dir);

}  // namespace weft::data
