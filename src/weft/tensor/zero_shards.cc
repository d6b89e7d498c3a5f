#include "weft/tensor/zero_shards.h"

#include <algorithm>

#include "weft/core/check.h"

namespace weft {

int64_t zero_padded_size(int64_t numel, int dp, int64_t align) {
  WEFT_CHECK(numel >= 0 && dp >= 1 && align >= 1, "zero_padded_size(", numel, ", ", dp, ", ", align,
             ")");
  const int64_t unit = int64_t{dp} * align;
  return (numel + unit - 1) / unit * unit;
}

ShardRange zero_shard(int64_t numel, int dp, int rank, int64_t align) {
  WEFT_CHECK(rank >= 0 && rank < dp, "rank ", rank, " outside dp=", dp);
  const int64_t per = zero_padded_size(numel, dp, align) / dp;
  return {rank * per, (rank + 1) * per};
}

std::vector<SlicePart> slices_in_range(const BufferLayout& layout, ShardRange range) {
  std::vector<SlicePart> parts;
  const auto& slices = layout.slices();
  for (size_t i = 0; i < slices.size(); ++i) {
    const int64_t b = std::max(range.begin, slices[i].offset);
    const int64_t e = std::min(range.end, slices[i].offset + slices[i].numel);
    if (b < e) parts.push_back({i, b, e});
  }
  return parts;
}

}  // namespace weft
