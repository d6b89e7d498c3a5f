#pragma once
// ZeRO's partition of a flat buffer across data-parallel ranks (Rajbhandari et al. 2020, "ZeRO:
// Memory Optimizations Toward Training Trillion Parameter Models", §5): the buffer of `numel`
// elements is padded to a multiple of dp * align and rank r owns the r-th of dp equal,
// contiguous, aligned ranges. A range may start or end inside a parameter; slices_in_range says
// which parts of which slices it holds (the optimizer needs each part's weight-decay flag).
// Pure arithmetic, shared by the optimizer and the planner's memory model.

#include <cstdint>
#include <vector>

#include "weft/tensor/flat_buffer.h"

namespace weft {

struct ShardRange {
  int64_t begin = 0, end = 0;  // element offsets in the flat buffer, end exclusive
  int64_t size() const { return end - begin; }
  bool operator==(const ShardRange&) const = default;
};

// numel rounded up to a multiple of dp * align: what a reduce-scatter or all-gather moves.
int64_t zero_padded_size(int64_t numel, int dp, int64_t align = 16);

// Rank r's range of the padded buffer: [r * padded/dp, (r+1) * padded/dp). It may run past numel
// (padding); clip with std::min(end, numel) where real elements are needed.
ShardRange zero_shard(int64_t numel, int dp, int rank, int64_t align = 16);

// The part of slice `slice` (an index into layout.slices()) that falls in a range.
struct SlicePart {
  size_t slice = 0;
  int64_t begin = 0, end = 0;  // element offsets in the flat buffer
  bool operator==(const SlicePart&) const = default;
};

// Every slice that overlaps `range`, in buffer order, clipped to it.
std::vector<SlicePart> slices_in_range(const BufferLayout& layout, ShardRange range);

}  // namespace weft
