#include "weft/model/zero_parts.h"

#include "weft/core/check.h"
#include "weft/tensor/zero_shards.h"

namespace weft::model {

std::vector<OwnedPart> zero_owned_parts(const ParamLayout& layout, int zero, int dp, int rank) {
  WEFT_CHECK(dp >= 1 && rank >= 0 && rank < dp, "dp rank ", rank, " of ", dp);
  std::vector<OwnedPart> parts;
  const auto& slices = layout.buffer.slices();
  if (zero == 0) {
    for (size_t i = 0; i < slices.size(); ++i)
      parts.push_back({i, 0, slices[i].numel, slices[i].offset});
    return parts;
  }
  int64_t offset = 0;
  for (const ParamUnit& U : layout.units) {
    const ShardRange own = zero_shard(U.numel(), dp, rank);
    for (const SlicePart& p :
         slices_in_range(layout.buffer, {U.begin + own.begin, U.begin + own.end})) {
      parts.push_back({p.slice, p.begin - slices[p.slice].offset, p.end - p.begin,
                       offset + (p.begin - U.begin - own.begin)});
    }
    offset += own.size();
  }
  return parts;
}

int64_t zero_owned_elements(const ParamLayout& layout, int zero, int dp, int rank) {
  if (zero == 0) return layout.buffer.total();
  int64_t n = 0;
  for (const ParamUnit& U : layout.units) n += zero_shard(U.numel(), dp, rank).size();
  return n;
}

}  // namespace weft::model
