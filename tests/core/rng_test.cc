// Counter-based random numbers: Philox4x32-10 against the Random123 known-answer vectors, values
// that are pure functions of (seed, name, index), shard-exact fills, and the distributions.

#include "weft/core/rng.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace weft {
namespace {

using Block = std::array<uint32_t, 4>;

// Random123 writes the key as two words {k0, k1}; ours packs them as k0 | k1 << 32.
uint64_t key_of(uint32_t k0, uint32_t k1) { return uint64_t{k0} | (uint64_t{k1} << 32); }

TEST(Philox, MatchesTheRandom123KnownAnswerForZeroCounterAndKey) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, key_of(0, 0)),
            (Block{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
}

TEST(Philox, MatchesTheRandom123KnownAnswerForAllOnes) {
  EXPECT_EQ(
      philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, key_of(0xffffffff, 0xffffffff)),
      (Block{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
}

TEST(Philox, MatchesTheRandom123KnownAnswerForTheDigitsOfPi) {
  EXPECT_EQ(
      philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, key_of(0xa4093822, 0x299f31d0)),
      (Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(StreamKey, IsAPureFunctionOfSeedAndName) {
  EXPECT_EQ(stream_key(7, "h.0.attn.qkv.w"), stream_key(7, "h.0.attn.qkv.w"));
}

TEST(StreamKey, DiffersAcrossNamesAndSeeds) {
  std::set<uint64_t> keys;
  const std::vector<std::string> names = {"",          "wte",        "wpe",       "h.0.ln1.w",
                                          "h.1.ln1.w", "h.10.ln1.w", "h.0.ln1.b", "wte "};
  for (uint64_t seed : {0ull, 1ull, 2ull, 1337ull, ~0ull}) {
    for (const auto& name : names) keys.insert(stream_key(seed, name));
  }
  EXPECT_EQ(keys.size(), 5 * names.size());
}

TEST(Rng, ValuesDependOnlyOnKeyAndIndex) {
  const uint64_t key = stream_key(42, "wte");
  std::vector<float> forward, backward(100);
  for (uint64_t i = 0; i < 100; ++i) forward.push_back(normal_at(key, i));
  (void)normal_at(stream_key(1, "other"), 5);  // no hidden state between calls
  for (int i = 99; i >= 0; --i) backward[i] = normal_at(key, static_cast<uint64_t>(i));
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(uniform_at(key, 12345), uniform_at(key, 12345));
}

TEST(Rng, ValuesDifferAcrossNamesSeedsAndIndices) {
  const uint64_t a = stream_key(1, "wte"), b = stream_key(1, "wpe"), c = stream_key(2, "wte");
  int same_ab = 0, same_ac = 0, same_next = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    same_ab += normal_at(a, i) == normal_at(b, i);
    same_ac += normal_at(a, i) == normal_at(c, i);
    same_next += normal_at(a, i) == normal_at(a, i + 1);
  }
  EXPECT_EQ(same_ab, 0);
  EXPECT_EQ(same_ac, 0);
  EXPECT_EQ(same_next, 0);
}

TEST(Rng, UsesAllSixtyFourBitsOfTheIndex) {
  const uint64_t key = stream_key(3, "x");
  EXPECT_NE(normal_at(key, 0), normal_at(key, uint64_t{1} << 32));
  EXPECT_NE(uniform_at(key, 5), uniform_at(key, 5 + (uint64_t{1} << 32)));
}

TEST(FillNormal, WritesMeanPlusStdTimesTheStreamValues) {
  const uint64_t key = stream_key(7, "h.3.mlp.fc.w");
  std::vector<float> out(257);
  fill_normal(out.data(), static_cast<int64_t>(out.size()), key, 11, 0.5f, 0.02f);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_FLOAT_EQ(out[i], 0.5f + 0.02f * normal_at(key, 11 + i)) << i;
  }
}

// The property that makes sharded initialization exact: a shard that fills from its global
// offset draws exactly the slice of the serial fill.
TEST(FillNormal, WithAnOffsetEqualsTheSliceOfALongerFill) {
  const uint64_t key = stream_key(1234, "wte");
  constexpr int64_t kN = 100003;  // large enough to run in parallel, odd to leave a remainder
  std::vector<float> whole(kN);
  fill_normal(whole.data(), kN, key, 0, 0.0f, 0.02f);
  const int64_t cuts[] = {0, 1, 17, 40000, 65536, 99999, kN};
  for (size_t k = 0; k + 1 < std::size(cuts); ++k) {
    const int64_t first = cuts[k], n = cuts[k + 1] - cuts[k];
    std::vector<float> shard(static_cast<size_t>(n));
    fill_normal(shard.data(), n, key, static_cast<uint64_t>(first), 0.0f, 0.02f);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(shard[static_cast<size_t>(i)], whole[static_cast<size_t>(first + i)])
          << "shard [" << first << ", " << cuts[k + 1] << ") element " << i;
    }
  }
}

TEST(NormalAt, HasZeroMeanAndUnitStd) {
  constexpr int kN = 100000;
  std::vector<float> x(kN);
  fill_normal(x.data(), kN, stream_key(2024, "normal"), 0, 0.0f, 1.0f);
  double sum = 0, sum_sq = 0;
  int within_one = 0;
  for (float v : x) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sum_sq += double{v} * v;
    within_one += std::abs(v) < 1.0f;
  }
  const double mean = sum / kN;
  const double std = std::sqrt(sum_sq / kN - mean * mean);
  // Standard errors: mean 0.0032, std 0.0022, fraction 0.0015.
  EXPECT_NEAR(mean, 0.0, 0.015);
  EXPECT_NEAR(std, 1.0, 0.011);
  EXPECT_NEAR(within_one / double{kN}, 0.6827, 0.0075);
}

TEST(FillNormal, ScalesToTheRequestedMeanAndStd) {
  constexpr int kN = 100000;
  std::vector<float> x(kN);
  fill_normal(x.data(), kN, stream_key(5, "scaled"), 0, 3.0f, 0.5f);
  double sum = 0, sum_sq = 0;
  for (float v : x) {
    sum += v;
    sum_sq += double{v} * v;
  }
  const double mean = sum / kN;
  EXPECT_NEAR(mean, 3.0, 0.0075);
  EXPECT_NEAR(std::sqrt(sum_sq / kN - mean * mean), 0.5, 0.0055);
}

TEST(UniformAt, IsStrictlyInsideTheUnitIntervalWithMeanOneHalf) {
  constexpr int kN = 100000;
  const uint64_t key = stream_key(9, "uniform");
  double sum = 0, sum_sq = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    const float u = uniform_at(key, i);
    ASSERT_GT(u, 0.0f) << i;
    ASSERT_LT(u, 1.0f) << i;
    sum += u;
    sum_sq += double{u} * u;
  }
  const double mean = sum / kN;
  EXPECT_NEAR(mean, 0.5, 0.005);                            // standard error 0.0009
  EXPECT_NEAR(sum_sq / kN - mean * mean, 1.0 / 12, 0.002);  // standard error 0.0003
}

// Index 17216488 of this stream draws 0xffffff06 from Philox: the largest 24-bit bucket, which
// once rounded to exactly 1.0f.
TEST(UniformAt, StaysBelowOneForTheLargestRawDraw) {
  const uint64_t key = stream_key(0, "uniform");
  ASSERT_EQ(philox4x32({17216488, 0, 0, 0}, key)[0], 0xffffff06u);
  EXPECT_LT(uniform_at(key, 17216488), 1.0f);
  EXPECT_GT(uniform_at(key, 17216488), 0.99999f);
}

}  // namespace
}  // namespace weft
