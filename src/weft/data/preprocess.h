#pragma once
// `weft preprocess`: text in, a Megatron indexed dataset out (PREFIX.bin, PREFIX.idx, and the
// sidecar PREFIX.json), streaming, on every core.
//
// Documents:
//   .jsonl  one JSON object per line, the document in its "text" field (--json-key), as Megatron's
//           tools/preprocess_data.py reads it. Blank lines are skipped; a line that is not a JSON
//           object with that string field is an error naming FILE:LINE. A line must fit in memory.
//   .txt    the whole file is one document; with split_blank_lines, each run of lines separated by
//           blank (empty or whitespace-only) lines is one, its bytes verbatim minus the line break
//           after its last line.
// Each document's tokens are followed by the tokenizer's end-of-text id (EOD, as --append-eod
// does); a document with no text is skipped. Input must be valid UTF-8: the first invalid byte is
// an error naming FILE:LINE.
//
// Streaming: the input is read in blocks and cut into pieces of about piece_bytes, which worker
// threads encode; the writer thread appends their tokens in input order. At most a few pieces per
// worker are in flight, so memory is bounded by workers x piece_bytes whatever the input size.
// A long document is encoded in pieces cut at a line break; find_cut() chooses the cut so that
// the pieces encode to exactly the ids of the whole (see there).
//
// Failure leaves nothing behind: outputs are written under temporary names and renamed only at
// the end; an existing dataset at PREFIX stays as it was.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/status.h"
#include "weft/data/file_io.h"

namespace weft::data {

struct PreprocessOptions {
  std::string input;               // .txt or .jsonl
  std::string tokenizer = "gpt2";  // "gpt2" (resolve_tokenizer_dir) or a tokenizer directory
  std::string output;              // PREFIX
  int workers = 0;                 // encoding threads; 0: one per hardware thread
  std::string json_key = "text";
  bool split_blank_lines = false;
  bool progress = true;           // a progress line on stderr
  int64_t piece_bytes = 1 << 20;  // text per unit of work (tests make it small)
};

struct PreprocessStats {
  int64_t documents = 0;
  int64_t empty_documents = 0;  // skipped
  int64_t tokens = 0;           // EOD included
  int64_t input_bytes = 0;
  double seconds = 0;
  int workers = 0;
  TokenType token_type = TokenType::U16;
  std::string bin_path, idx_path, json_path;
};

// What preprocess needs of a tokenizer; encode() is called from many threads at once.
struct TextEncoder {
  std::function<void(std::string_view text, std::vector<int32_t>& out)> encode_into;  // appends
  int vocab_size = 0;
  int32_t eod = 0;
  std::string identity;
};

// Loads options.tokenizer (BpeTokenizer) and runs.
Result<PreprocessStats> preprocess(const PreprocessOptions& options);
// Runs with a given tokenizer (tests use small synthetic ones).
Result<PreprocessStats> preprocess(const PreprocessOptions& options, const TextEncoder& encoder);

// Where to cut text[0, hi] so that text[0, p) and text[p, ...) encode to the ids of the whole:
// the largest p in [lo, hi] just after a '\n' whose neighbours text[p-2] and text[p] are neither
// whitespace nor control characters. GPT-2's pre-tokenization regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// only ever puts '\n' in a whitespace piece; with non-space on both sides that piece is the lone
// "\n" in both encodings, every other piece ends before it or starts after it, and BPE merges
// never cross pieces. (A bare "cut after any newline" is not enough: "a\n\n\nb" pre-tokenizes as
// "a", "\n\n", "\n", "b", while "a\n" + "\n\nb" gives "a", "\n" + "\n", "\n", "b": other ids.)
// When the window has no such point: the last '\n', else the last UTF-8 character boundary at or
// before hi; the ids may then differ near the cut (ordinary text always has such points, and the
// window is half a piece wide). Requires text.size() >= hi + 4 (the character after the cut is
// decoded).
size_t find_cut(std::string_view text, size_t lo, size_t hi);

// The offset of the first byte of s that is not part of valid UTF-8 (overlong forms, surrogates
// and code points above U+10FFFF are invalid), or npos.
size_t find_invalid_utf8(std::string_view s);

}  // namespace weft::data
