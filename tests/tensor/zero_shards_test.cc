#include "weft/tensor/zero_shards.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(ZeroShards, PadsToAMultipleOfRanksTimesAlignment) {
  EXPECT_EQ(zero_padded_size(0, 4), 0);
  EXPECT_EQ(zero_padded_size(1, 4), 64);
  EXPECT_EQ(zero_padded_size(64, 4), 64);
  EXPECT_EQ(zero_padded_size(65, 4), 128);
  EXPECT_EQ(zero_padded_size(100, 1, 1), 100);
  EXPECT_THROW(zero_padded_size(10, 0), Error);
}

TEST(ZeroShards, RangesAreEqualContiguousAlignedAndCoverTheBuffer) {
  for (int64_t numel : {1, 15, 16, 1000, 124475904}) {
    for (int dp : {1, 2, 3, 4, 8}) {
      int64_t next = 0;
      for (int r = 0; r < dp; ++r) {
        const ShardRange s = zero_shard(numel, dp, r);
        EXPECT_EQ(s.begin, next) << numel << " " << dp << " " << r;
        EXPECT_EQ(s.begin % 16, 0);
        EXPECT_EQ(s.size(), zero_padded_size(numel, dp) / dp);
        next = s.end;
      }
      EXPECT_EQ(next, zero_padded_size(numel, dp));
      EXPECT_GE(next, numel);
    }
  }
  EXPECT_THROW(zero_shard(100, 2, 2), Error);
}

TEST(ZeroShards, ARangeThatStraddlesParametersNamesEachPart) {
  BufferLayout l;
  l.add("a", {40});   // [0, 40), next slice aligned to 48
  l.add("b", {100});  // [48, 148) -> next at 160
  l.add("c", {8});    // [160, 168)
  ASSERT_EQ(l.at("b").offset, 48);
  ASSERT_EQ(l.at("c").offset, 160);
  // 2 ranks: total 176 elements (with the alignment padding) -> padded 192, 96 each.
  const ShardRange r0 = zero_shard(l.total(), 2, 0), r1 = zero_shard(l.total(), 2, 1);
  EXPECT_EQ(slices_in_range(l, r0), (std::vector<SlicePart>{{0, 0, 40}, {1, 48, 96}}));
  EXPECT_EQ(slices_in_range(l, r1), (std::vector<SlicePart>{{1, 96, 148}, {2, 160, 168}}));
  // Every element of every slice lands in exactly one rank's parts.
  int64_t covered = 0;
  for (const ShardRange& r : {r0, r1}) {
    for (const SlicePart& p : slices_in_range(l, r)) covered += p.end - p.begin;
  }
  EXPECT_EQ(covered, 40 + 100 + 8);
}

}  // namespace
}  // namespace weft
