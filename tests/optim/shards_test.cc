#include "weft/optim/shards.h"

#include <gtest/gtest.h>

namespace weft::optim {
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

// Two units over dp = 2 (unit_align 32): "u0" holds a [40] and b [100], "u1" holds c [8].
UnitLayout two_units() {
  UnitLayout l;
  l.unit_align = zero_unit_align(1, 2);
  l.buffer.add("a", {40}, l.unit_align);  // [0, 40)
  l.buffer.add("b", {100});               // [48, 148)
  l.buffer.add("c", {8}, l.unit_align);   // [160, 168)
  l.buffer.pad_to(l.unit_align);          // 192
  l.units = {{"u0", 0, 2, 0, 148}, {"u1", 2, 3, 160, 168}};
  return l;
}

TEST(ZeroShards, UnitAlignmentIsDpTimesSixteenFromZeroOne) {
  EXPECT_EQ(zero_unit_align(0, 8), 16);
  EXPECT_EQ(zero_unit_align(1, 8), 128);
  EXPECT_EQ(zero_unit_align(3, 2), 32);
  EXPECT_THROW(zero_unit_align(4, 2), Error);
}

TEST(ZeroShards, EachUnitsRangeFollowsTheLastInTheShardBuffers) {
  const UnitLayout l = two_units();
  // u0: 148 -> padded 160, 80 each; u1: 8 -> padded 32, 16 each.
  EXPECT_EQ(zero_unit_shards(l, 2, 0), (std::vector<UnitShard>{{0, 80, 0}, {0, 16, 80}}));
  EXPECT_EQ(zero_unit_shards(l, 2, 1), (std::vector<UnitShard>{{80, 80, 0}, {16, 16, 80}}));
  EXPECT_EQ(zero_owned_elements(l, 1, 2, 1), 96);
  EXPECT_EQ(zero_owned_elements(l, 0, 2, 1), 192);  // ZeRO 0: the whole buffer
}

TEST(ZeroShards, ARangeThatStraddlesParametersNamesEachPart) {
  const UnitLayout l = two_units();
  ASSERT_EQ(l.buffer.at("b").offset, 48);
  // Rank 0: a whole, b's first 32 elements (u0's [0, 80)), nothing of c (u1's [0, 16) holds c).
  EXPECT_EQ(zero_owned_parts(l, 2, 2, 0),
            (std::vector<OwnedPart>{{0, 0, 40, 0}, {1, 0, 32, 48}, {2, 0, 8, 80}}));
  // Rank 1: the rest of b (u0's [80, 160)), and u1's padding only.
  EXPECT_EQ(zero_owned_parts(l, 2, 2, 1), (std::vector<OwnedPart>{{1, 32, 68, 0}}));
  // ZeRO 0: every slice whole, where it sits in the buffer.
  EXPECT_EQ(zero_owned_parts(l, 0, 2, 1),
            (std::vector<OwnedPart>{{0, 0, 40, 0}, {1, 0, 100, 48}, {2, 0, 8, 160}}));
  // Every element of every slice lands in exactly one rank's parts.
  int64_t covered = 0;
  for (int r : {0, 1}) {
    for (const OwnedPart& p : zero_owned_parts(l, 3, 2, r)) covered += p.n;
  }
  EXPECT_EQ(covered, 40 + 100 + 8);
}

TEST(ZeroShards, AUnitWhosePaddedRangeOverrunsTheNextIsRejected) {
  UnitLayout l = two_units();
  l.units[1].begin = l.units[1].end = 150;  // u0's padded 160 would overwrite it
  EXPECT_THROW(zero_unit_shards(l, 2, 0), Error);
}

}  // namespace
}  // namespace weft::optim
