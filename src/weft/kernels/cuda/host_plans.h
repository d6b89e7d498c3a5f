#pragma once
// Host-side plans of the CUDA kernels: pure functions over sizes and token ids, computed on the
// CPU before a launch and uploaded. Header-only and CUDA-free, so they are unit-tested without a
// GPU (tests/kernels/cuda_host_test.cc).

#include <cstdint>
#include <span>
#include <vector>

#include "weft/core/check.h"

namespace weft::kernels::cuda {

// ---- multi-tensor launches ----------------------------------------------------------------
// One launch over many tensors (segments) of different sizes, as Apex's multi_tensor_apply: the
// elements are cut into chunks of at most `chunk` elements that never straddle two segments, and
// thread block i processes chunk i. The table is built once (the parameter list is fixed) and
// reused every step.
struct Chunk {
  int32_t segment;  // index into the segment list
  int32_t pad = 0;
  int64_t offset;  // first element of the chunk within its segment
};

inline std::vector<Chunk> make_chunks(std::span<const int64_t> segment_sizes, int64_t chunk) {
  WEFT_CHECK(chunk > 0, "chunk size ", chunk, " must be > 0");
  std::vector<Chunk> chunks;
  for (size_t s = 0; s < segment_sizes.size(); ++s) {
    WEFT_CHECK(segment_sizes[s] >= 0, "segment ", s, " has negative size ", segment_sizes[s]);
    for (int64_t offset = 0; offset < segment_sizes[s]; offset += chunk) {
      chunks.push_back(Chunk{static_cast<int32_t>(s), 0, offset});
    }
  }
  return chunks;
}

// ---- deterministic embedding backward -------------------------------------------------------
// dwte[token] receives the sum of the dout rows of every position holding that token. Summed with
// atomics, the order (and so the rounding) would change from run to run; instead the positions are
// grouped by token, in position order (a stable counting sort), and one thread block sums each
// group in that order.
//   positions[N]: 0..N-1 ordered by (token, position)
//   run_starts[R+1]: group r is positions[run_starts[r] .. run_starts[r+1])
//   run_tokens[R]: the token of group r
struct TokenRuns {
  std::vector<int32_t> positions;
  std::vector<int32_t> run_starts;
  std::vector<int32_t> run_tokens;
  int32_t num_runs() const { return static_cast<int32_t>(run_tokens.size()); }
};

inline TokenRuns group_tokens(std::span<const int32_t> tokens) {
  TokenRuns runs;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) {
    runs.run_starts.push_back(0);
    return runs;
  }
  int32_t max_token = 0;
  for (int64_t i = 0; i < n; ++i) {
    WEFT_CHECK(tokens[i] >= 0, "token ", tokens[i], " at position ", i, " is negative");
    max_token = tokens[i] > max_token ? tokens[i] : max_token;
  }
  // Counting sort: count, exclusive prefix sum, then place positions in increasing order (stable).
  std::vector<int32_t> start(static_cast<size_t>(max_token) + 2, 0);
  for (int64_t i = 0; i < n; ++i) ++start[static_cast<size_t>(tokens[i]) + 1];
  for (size_t v = 1; v < start.size(); ++v) start[v] += start[v - 1];
  runs.positions.resize(static_cast<size_t>(n));
  std::vector<int32_t> next(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    runs.positions[static_cast<size_t>(next[static_cast<size_t>(tokens[i])]++)] =
        static_cast<int32_t>(i);
  }
  for (size_t v = 0; v + 1 < start.size(); ++v) {
    if (start[v + 1] > start[v]) {
      runs.run_starts.push_back(start[v]);
      runs.run_tokens.push_back(static_cast<int32_t>(v));
    }
  }
  runs.run_starts.push_back(static_cast<int32_t>(n));
  return runs;
}

}  // namespace weft::kernels::cuda
