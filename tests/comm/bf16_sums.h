#pragma once
// bf16 inputs and checks of the communicator contract's tests (conformance.cc). A bf16 sum over
// ranks is rounded after every add, in an order each backend chooses (comm/communicator.h), so a
// test cannot know its bits in general. What it can know: sums of small integers are exact in bf16
// in any order; a sum of positive values is within one bf16 ulp per add of the exact sum rounded
// once; and every rank of an all-reduce gets the same bits.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "weft/core/dtype.h"

namespace weft::test {

// Element j of rank r's input: a bf16 in [0.5, 1) with its 7 mantissa bits drawn from a hash of
// (r, j), so that sums of them must round, and every rank can compute every rank's inputs.
inline BF16 random_bf16(int rank, int64_t j) {
  uint64_t h = (static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(j);
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64's finalizer
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  return BF16::from_float(0.5f + static_cast<float>(h % 128) / 256.0f);
}

// The sum over `size` ranks of element j, rounded once to bf16 (the fp32 sum of at most a few
// hundred values in [0.5, 1) of 8 significant bits is exact).
inline float rounded_sum(int size, int64_t j) {
  float sum = 0;
  for (int q = 0; q < size; ++q) sum += random_bf16(q, j).to_float();
  return BF16::from_float(sum).to_float();
}

// Whether `got`, a bf16 sum over `size` ranks of element j, is as close to the sum rounded once
// as per-add rounding allows. With positive inputs no partial sum exceeds the whole, so each of the
// size - 1 adds errs by at most half an ulp of the result's binade, and the once-rounded sum by
// another half: size/2 ulps in all, whole ulps between two bf16 values. One add (two ranks) is
// the sum rounded once, exactly.
inline ::testing::AssertionResult within_an_ulp_per_add(BF16 got, int size, int64_t j) {
  const float want = rounded_sum(size, j);
  const float ulp = std::ldexp(1.0f, std::ilogb(want) - 7);  // bf16 has 8 significant bits
  const int allowed = size <= 2 ? 0 : size / 2;
  const float off = std::abs(got.to_float() - want);
  if (off <= static_cast<float>(allowed) * ulp) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << j << " of a sum over " << size << " ranks: " << got.to_float()
         << ", the sum rounded once " << want << ", " << off / ulp << " ulps apart (" << allowed
         << " allowed)";
}

}  // namespace weft::test
