// 16-bit storage types: bf16 and f16 conversions round to nearest even, keep NaN a NaN, saturate to
// infinity on overflow and (f16) handle subnormals.

#include "weft/core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace weft {
namespace {

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint16_t bf16_bits(float f) { return BF16::from_float(f).bits; }
uint16_t f16_bits(float f) { return F16::from_float(f).bits; }
float bf16_value(uint16_t b) { return BF16{b}.to_float(); }
float f16_value(uint16_t b) { return F16{b}.to_float(); }

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(BF16, IsTheTopHalfOfAFloat) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits(-2.5f), 0xC020);
  EXPECT_EQ(bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(bf16_value(0x3F80), 1.0f);
  EXPECT_EQ(bf16_value(0xC020), -2.5f);
}

TEST(BF16, RoundTripsEveryNonNaNBitPatternExactly) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_value(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16_bits(f), b) << std::hex << "bits 0x" << b;
  }
}

TEST(BF16, RoundsToNearestEvenOnTies) {
  // bf16 keeps 7 mantissa bits: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(bf16_bits(from_bits(0x3F808000)), 0x3F80);  // tie, round down to even
  EXPECT_EQ(bf16_bits(from_bits(0x3F818000)), 0x3F82);  // tie, round up to even
  EXPECT_EQ(bf16_bits(from_bits(0x3F808001)), 0x3F81);  // just above the tie
  EXPECT_EQ(bf16_bits(from_bits(0x3F807FFF)), 0x3F80);  // just below the tie
  EXPECT_EQ(bf16_bits(from_bits(0xBF818000)), 0xBF82);  // negative values mirror
}

TEST(BF16, CarriesIntoTheExponentWhenRoundingUp) {
  EXPECT_EQ(bf16_bits(from_bits(0x3FFF8000)), 0x4000);  // tie above 0x3FFF (odd) -> 2
  EXPECT_EQ(bf16_value(bf16_bits(from_bits(0x3FFF8000))), 2.0f);
}

TEST(BF16, KeepsInfinities) {
  EXPECT_EQ(bf16_bits(kInf), 0x7F80);
  EXPECT_EQ(bf16_bits(-kInf), 0xFF80);
  EXPECT_EQ(bf16_value(0x7F80), kInf);
  EXPECT_EQ(bf16_value(0xFF80), -kInf);
}

TEST(BF16, OverflowsToInfinityAboveTheLargestFinite) {
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(bf16_bits(from_bits(0x7F7F7FFF)), 0x7F7F);  // stays finite below the tie
}

TEST(BF16, NaNStaysNaN) {
  EXPECT_TRUE(std::isnan(bf16_value(bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low 16 bits must not truncate to infinity.
  EXPECT_TRUE(std::isnan(bf16_value(bf16_bits(from_bits(0x7F800001)))));
  EXPECT_TRUE(std::isnan(bf16_value(bf16_bits(from_bits(0xFF800001)))));
  EXPECT_TRUE(std::isnan(bf16_value(bf16_bits(from_bits(0x7FFFFFFF)))));
}

TEST(F16, ConvertsSimpleValuesExactly) {
  EXPECT_EQ(f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(f16_bits(0.5f), 0x3800);
  EXPECT_EQ(f16_bits(65504.0f), 0x7BFF);  // largest finite
  EXPECT_EQ(f16_bits(0.0f), 0x0000);
  EXPECT_EQ(f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f16_value(0x3C00), 1.0f);
  EXPECT_EQ(f16_value(0x7BFF), 65504.0f);
}

TEST(F16, RoundTripsEveryNonNaNBitPatternExactly) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = f16_value(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f16_bits(f), b) << std::hex << "bits 0x" << b;
  }
}

TEST(F16, RepresentsSubnormalsExactly) {
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -20)), 0x0010);
  EXPECT_EQ(f16_bits(-std::ldexp(1.0f, -20)), 0x8010);
  EXPECT_EQ(f16_bits(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(f16_value(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_value(0x0010), std::ldexp(1.0f, -20));
  EXPECT_EQ(f16_value(0x8010), -std::ldexp(1.0f, -20));
}

TEST(F16, RoundsToNearestEvenOnTies) {
  // Normal range: f16 keeps 10 mantissa bits, so 1 + 2^-11 is a tie.
  EXPECT_EQ(f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(f16_bits(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  EXPECT_EQ(f16_bits(-(1.0f + 3 * std::ldexp(1.0f, -11))), 0xBC02);
  // Subnormal range: ties on the 2^-24 grid.
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f16_bits(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(f16_bits(std::ldexp(5.0f, -25)), 0x0002);
  EXPECT_EQ(f16_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
}

TEST(F16, RoundsUpFromTheSubnormalRangeIntoTheSmallestNormal) {
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
  EXPECT_EQ(f16_bits(std::ldexp(4095.0f, -11)), 0x4000);  // 2 - 2^-11 is a tie -> 2
}

TEST(F16, FlushesTinyFloatsToSignedZero) {
  EXPECT_EQ(f16_bits(1e-30f), 0x0000);
  EXPECT_EQ(f16_bits(-1e-30f), 0x8000);
  EXPECT_EQ(f16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(F16, OverflowsToInfinityFrom65520) {
  EXPECT_EQ(f16_bits(65519.0f), 0x7BFF);  // below the tie: largest finite
  EXPECT_EQ(f16_bits(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(f16_bits(65520.0f), 0x7C00);  // the tie rounds to even, which is infinity
  EXPECT_EQ(f16_bits(-65520.0f), 0xFC00);
  EXPECT_EQ(f16_bits(1e6f), 0x7C00);
  EXPECT_EQ(f16_bits(std::numeric_limits<float>::max()), 0x7C00);
}

TEST(F16, KeepsInfinities) {
  EXPECT_EQ(f16_bits(kInf), 0x7C00);
  EXPECT_EQ(f16_bits(-kInf), 0xFC00);
  EXPECT_EQ(f16_value(0x7C00), kInf);
  EXPECT_EQ(f16_value(0xFC00), -kInf);
}

TEST(F16, NaNStaysNaN) {
  EXPECT_TRUE(std::isnan(f16_value(f16_bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(f16_value(f16_bits(from_bits(0x7F800001)))));  // payload in low bits
  EXPECT_TRUE(std::isnan(f16_value(f16_bits(from_bits(0xFFC00000)))));
  EXPECT_TRUE(std::isnan(f16_value(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_value(0x7C01)));
}

}  // namespace
}  // namespace weft
