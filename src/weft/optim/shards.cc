#include "weft/optim/shards.h"

#include <algorithm>

#include "weft/core/check.h"

namespace weft::optim {

int64_t zero_unit_align(int zero, int dp) {
  WEFT_CHECK(zero >= 0 && zero <= 3 && dp >= 1, "ZeRO stage ", zero, " over dp=", dp);
  if (zero == 0) return BufferLayout::kAlignElems;
  return int64_t{dp} * BufferLayout::kAlignElems;
}

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

std::vector<UnitShard> zero_unit_shards(const UnitLayout& layout, int dp, int rank) {
  std::vector<UnitShard> shards;
  int64_t at = 0;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const ParamUnit& U = layout.units[u];
    const ShardRange own = zero_shard(U.numel(), dp, rank);
    // The collectives run in place over the padded range: it must end before the next unit.
    const int64_t next =
        u + 1 < layout.units.size() ? layout.units[u + 1].begin : layout.buffer.total();
    WEFT_CHECK(own.size() * dp <= next - U.begin, "unit ", U.name, "'s padded range overruns");
    shards.push_back({own.begin, own.size(), at});
    at += own.size();
  }
  return shards;
}

std::vector<OwnedPart> zero_owned_parts(const UnitLayout& layout, int zero, int dp, int rank) {
  WEFT_CHECK(dp >= 1 && rank >= 0 && rank < dp, "dp rank ", rank, " of ", dp);
  std::vector<OwnedPart> parts;
  const auto& slices = layout.buffer.slices();
  if (zero == 0) {
    for (size_t i = 0; i < slices.size(); ++i)
      parts.push_back({i, 0, slices[i].numel, slices[i].offset});
    return parts;
  }
  const std::vector<UnitShard> shards = zero_unit_shards(layout, dp, rank);
  for (size_t u = 0; u < shards.size(); ++u) {
    const ParamUnit& U = layout.units[u];
    const int64_t begin = U.begin + shards[u].begin, end = begin + shards[u].size;
    for (size_t i = U.first_slice; i < U.end_slice; ++i) {  // the slices' parts in [begin, end)
      const int64_t b = std::max(begin, slices[i].offset);
      const int64_t e = std::min(end, slices[i].offset + slices[i].numel);
      if (b < e) parts.push_back({i, b - slices[i].offset, e - b, shards[u].at + (b - begin)});
    }
  }
  return parts;
}

int64_t zero_owned_elements(const UnitLayout& layout, int zero, int dp, int rank) {
  if (zero == 0) return layout.buffer.total();
  const std::vector<UnitShard> shards = zero_unit_shards(layout, dp, rank);
  return shards.empty() ? 0 : shards.back().at + shards.back().size;
}

}  // namespace weft::optim
