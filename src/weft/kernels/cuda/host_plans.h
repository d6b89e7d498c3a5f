#pragma once
// Host-side plans of the CUDA kernels: pure functions over sizes and token ids, computed on the
// CPU before a launch and uploaded. Header-only and CUDA-free, so they are unit-tested without a
// GPU (tests/kernels/cuda_host_test.cc).

#include <algorithm>
#include <cstdint>
#include <limits>
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

// The plan of a vocabulary shard (a tensor-parallel rank holding rows [v0, v0 + count) of wte):
// only the positions whose token falls in that range are grouped, and run_tokens are local rows
// (token - v0); tokens outside it (other ranks' ids, or negative ones) are skipped. positions may
// then hold fewer than tokens.size() entries, and there may be no run at all.
inline TokenRuns group_tokens_in_range(std::span<const int32_t> tokens, int64_t v0, int64_t count) {
  WEFT_CHECK(v0 >= 0 && count >= 0, "token range [", v0, ", ", v0, " + ", count, ") is invalid");
  TokenRuns runs;
  const int64_t n = static_cast<int64_t>(tokens.size());
  // local[i]: the row of position i, or -1 when its token is outside the range.
  auto local = [&](int64_t i) -> int64_t {
    const int64_t row = static_cast<int64_t>(tokens[static_cast<size_t>(i)]) - v0;
    return row >= 0 && row < count ? row : -1;
  };
  // Counting sort over the rows that occur: count, exclusive prefix sum, then place positions in
  // increasing order (stable). The table spans the largest row present, not `count`, so the
  // unsharded plan costs what it did.
  int64_t max_row = -1;
  for (int64_t i = 0; i < n; ++i) max_row = std::max(max_row, local(i));
  std::vector<int32_t> start(static_cast<size_t>(max_row + 2), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = local(i);
    if (row >= 0) ++start[static_cast<size_t>(row) + 1];
  }
  for (size_t v = 1; v < start.size(); ++v) start[v] += start[v - 1];
  runs.positions.resize(static_cast<size_t>(start.back()));
  std::vector<int32_t> next(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = local(i);
    if (row >= 0) {
      runs.positions[static_cast<size_t>(next[static_cast<size_t>(row)]++)] =
          static_cast<int32_t>(i);
    }
  }
  for (size_t v = 0; v + 1 < start.size(); ++v) {
    if (start[v + 1] > start[v]) {
      runs.run_starts.push_back(start[v]);
      runs.run_tokens.push_back(static_cast<int32_t>(v));
    }
  }
  runs.run_starts.push_back(start.back());
  return runs;
}

// Every position, grouped by token; ids must be >= 0.
inline TokenRuns group_tokens(std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    WEFT_CHECK(tokens[i] >= 0, "token ", tokens[i], " at position ", i, " is negative");
  }
  return group_tokens_in_range(tokens, 0, int64_t{std::numeric_limits<int32_t>::max()} + 1);
}

}  // namespace weft::kernels::cuda
