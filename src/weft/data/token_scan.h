#pragma once
// The range of token ids a dataset holds, for datasets whose vocabulary nothing records (Megatron
// .bin/.idx made by other tools, llm.c files without weft's PREFIX.json sidecar): one parallel,
// streaming pass over the tokens at start-up, so that an id outside the model's vocabulary is one
// error before the first step instead of an internal check at the step that first samples it
// (and again at the same step after every --resume).
//
// The verdict is cached in a small JSON file, beside the dataset when its directory is writable
// (PREFIX.bin.ids.json), else in a fallback directory (the run's out_dir). The cache is keyed by
// each file's path, size, modification time and an XXH3 checksum of its first and last MiB: a full
// checksum would cost as much as the scan it saves.

#include <cstdint>
#include <string>

#include "weft/core/status.h"
#include "weft/data/token_dataset.h"

namespace weft::data {

struct TokenIdRange {
  int64_t min = 0, max = -1;  // over every token; max = -1 for an empty dataset
  int64_t tokens = 0;
};

// One pass over every token of `d` with `threads` threads (0: every core).
TokenIdRange scan_token_ids(const TokenDataset& d, int threads = 0);

struct CachedScan {
  TokenIdRange range;
  bool cached = false;     // read from the cache, no scan
  std::string cache_path;  // where the verdict is (or would have been) kept; "" if nowhere
  double seconds = 0;      // the scan's time (0 when cached)
};

// scan_token_ids(d) through the cache described above; `fallback_dir` ("" for none) holds it when
// the dataset's directory is not writable. A cache that cannot be written is not an error.
CachedScan scan_token_ids_cached(const TokenDataset& d, const std::string& fallback_dir,
                                 int threads = 0);

// Ok when every id of `range` is in [0, vocab_size); else the error names the dataset, the id,
// where it first occurs and the model's vocab_size.
Status check_token_ids(const TokenIdRange& range, const std::string& data_path, int vocab_size);

}  // namespace weft::data
