#pragma once
// bf16 results counted in units in the last place (ulps), for comparisons where two computations
// round to bf16 at the same points (two emulations, or the GPU against the host emulation): such
// results agree bit for bit except where the fp32 (or double) values before the rounding straddle
// a rounding boundary, so "at most 1 ulp apart, on all but a few elements" is the right test, and
// a relative L2 bound, which a wrong rounding mode passes (issue #18: round-toward-zero raised
// ||out - ref|| / ||ref|| from 2e-3 to 3.3e-3), is not. A biased rounding mode keeps every element
// within 1 ulp; it shows up in how many elements differ and in the mean signed difference: about
// -0.5 ulp away from zero for round-toward-zero, where an unbiased difference averages to ~0.
//
//   bf16_ulp_stats(actual, reference)   counts (reference: bf16, or double rounded here to the
//                                       nearest bf16, ties to even, in a single rounding);
//   EXPECT_TRUE(bf16_ulps_within(actual, reference, bounds)) << "what";
//                                       fails with the counts when a bound is exceeded.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <ostream>
#include <span>
#include <vector>

#include "weft/core/dtype.h"

namespace weft::test {

// x's place on the bf16 number line: the bits as a monotonic integer, -0 and +0 both 0, so
// adjacent finite bf16 values differ by 1 and |ordinal(a) - ordinal(b)| is the number of ulps
// between a and b, across 0 too.
inline int bf16_ordinal(BF16 x) {
  const int magnitude = x.bits & 0x7FFF;
  return (x.bits & 0x8000) != 0 ? -magnitude : magnitude;
}

inline bool bf16_finite(BF16 x) { return (x.bits & 0x7F80) != 0x7F80; }

// x rounded to the nearest bf16, ties to the even one, in one rounding: a double rounded to float
// first and then to bf16 can land on a bf16 midpoint and go the wrong way. Written without
// BF16::from_float (the rounding under test elsewhere): the two bf16 neighbours of x by bits, and
// the nearer of them by an exact double subtraction (Sterbenz: both are within a factor 2 of x).
inline BF16 round_to_bf16(double x) {
  if (std::isnan(x)) return BF16{0x7FC0};
  const double magnitude = std::abs(x);
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (magnitude >= static_cast<double>(std::numeric_limits<float>::max())) {
    return BF16{static_cast<uint16_t>(sign | 0x7F80)};  // beyond bf16's largest (3.39e38): inf
  }
  float below = static_cast<float>(magnitude);  // the float nearest |x|, then the one <= |x|
  if (static_cast<double>(below) > magnitude) below = std::nextafter(below, 0.f);
  const auto lo_bits = static_cast<uint16_t>(std::bit_cast<uint32_t>(below) >> 16);  // <= |x|
  const auto hi_bits = static_cast<uint16_t>(lo_bits + 1);                           // > |x|
  const double lo = static_cast<double>(BF16{lo_bits}.to_float());
  const double hi = hi_bits == 0x7F80 ? std::ldexp(1.0, 128)  // inf: rounds as 2^128 would
                                      : static_cast<double>(BF16{hi_bits}.to_float());
  const double to_lo = magnitude - lo, to_hi = hi - magnitude;
  const bool up = to_hi < to_lo || (to_hi == to_lo && (lo_bits & 1) != 0);
  return BF16{static_cast<uint16_t>(sign | (up ? hi_bits : lo_bits))};
}

// How far `actual` is from `reference`, element by element, in bf16 ulps.
struct UlpStats {
  int64_t count = 0;            // elements compared
  int64_t equal = 0;            // the same value (0 ulps; +0 and -0 equal; NaN and NaN equal)
  int64_t one_ulp = 0;          // exactly 1 ulp apart
  int64_t nonfinite = 0;        // NaN or inf on one side where the other differs: never allowed
  int64_t max_ulps = 0;         // the largest distance between finite elements
  int64_t sum_ulps = 0;         // sum of |distance| over finite elements
  int64_t sum_signed = 0;       // sum of (actual - reference) in ulps
  int64_t sum_away = 0;         // the same signed away from zero: > 0 where |actual| > |reference|
  std::vector<int64_t> beyond;  // the distances above 1 ulp, counted: beyond[d] for d <= 15,
                                // beyond[16] for everything further
  int64_t more_than(int64_t ulps) const {
    int64_t n = nonfinite;
    for (size_t d = 0; d < beyond.size(); ++d) n += static_cast<int64_t>(d) > ulps ? beyond[d] : 0;
    return n;
  }
  double fraction(int64_t n) const { return count == 0 ? 0.0 : static_cast<double>(n) / count; }
  double differing_fraction() const { return fraction(count - equal); }
  double mean_signed() const { return fraction(sum_signed); }  // in ulps
  double mean_away() const { return fraction(sum_away); }      // in ulps
};

inline std::ostream& operator<<(std::ostream& os, const UlpStats& s) {
  os << s.count << " elements: " << s.equal << " equal, " << s.one_ulp << " 1 ulp apart, "
     << s.more_than(1) << " further (" << s.nonfinite << " non-finite), max " << s.max_ulps
     << " ulps; mean signed " << s.mean_signed() << " ulp, away from zero " << s.mean_away()
     << " ulp";
  return os;
}

inline UlpStats bf16_ulp_stats(std::span<const BF16> actual, std::span<const BF16> reference) {
  EXPECT_EQ(actual.size(), reference.size());
  UlpStats s;
  s.beyond.assign(17, 0);
  for (size_t i = 0; i < actual.size() && i < reference.size(); ++i) {
    ++s.count;
    const BF16 a = actual[i], r = reference[i];
    if (!bf16_finite(a) || !bf16_finite(r)) {
      const bool both_nan = std::isnan(a.to_float()) && std::isnan(r.to_float());
      if (both_nan || a.bits == r.bits) {
        ++s.equal;
      } else {
        ++s.nonfinite;
      }
      continue;
    }
    const int64_t diff = bf16_ordinal(a) - bf16_ordinal(r);
    const int64_t distance = std::abs(diff);
    if (distance == 0) {
      ++s.equal;
      continue;
    }
    if (distance == 1) {
      ++s.one_ulp;
    } else {
      ++s.beyond[static_cast<size_t>(std::min<int64_t>(distance, 16))];
    }
    s.max_ulps = std::max(s.max_ulps, distance);
    s.sum_ulps += distance;
    s.sum_signed += diff;
    // Away from zero: along the reference's sign (the actual value's when the reference is 0).
    const int ref_sign =
        bf16_ordinal(r) != 0 ? (bf16_ordinal(r) > 0 ? 1 : -1) : (diff > 0 ? 1 : -1);
    s.sum_away += ref_sign * diff;
  }
  return s;
}

// Against a double reference, rounded once to the nearest bf16 (ties to even).
inline UlpStats bf16_ulp_stats(std::span<const BF16> actual, std::span<const double> reference) {
  std::vector<BF16> rounded(reference.size());
  for (size_t i = 0; i < reference.size(); ++i) rounded[i] = round_to_bf16(reference[i]);
  return bf16_ulp_stats(actual, std::span<const BF16>(rounded));
}

// What a comparison allows. Fractions are of all elements compared; the means are in ulps.
struct UlpBounds {
  int64_t max_ulps = 1;        // the distance allowed on all but a few elements...
  double max_beyond = 0.0;     // ...the fraction of elements further than that
  int64_t max_worst = 1;       // no element further than this
  double max_differing = 0.0;  // the fraction of elements not equal
  double max_abs_mean = 0.0;   // |mean signed| and |mean away from zero|
};

inline ::testing::AssertionResult bf16_ulps_within(const UlpStats& s, const UlpBounds& b) {
  const int64_t beyond = s.more_than(b.max_ulps);
  const bool ok = s.nonfinite == 0 && s.fraction(beyond) <= b.max_beyond &&
                  s.max_ulps <= b.max_worst && s.differing_fraction() <= b.max_differing &&
                  std::abs(s.mean_signed()) <= b.max_abs_mean &&
                  std::abs(s.mean_away()) <= b.max_abs_mean;
  auto result = ok ? ::testing::AssertionSuccess() : ::testing::AssertionFailure();
  return result << s << "; allowed: " << b.max_beyond << " of elements beyond " << b.max_ulps
                << " ulp (got " << s.fraction(beyond) << "), none beyond " << b.max_worst << ", "
                << b.max_differing << " differing (got " << s.differing_fraction()
                << "), |means| <= " << b.max_abs_mean;
}

// Any contiguous containers of BF16 (actual) and BF16 or double (reference).
template <typename VA, typename VR>
::testing::AssertionResult bf16_ulps_within(const VA& actual, const VR& reference,
                                            const UlpBounds& b) {
  return bf16_ulps_within(
      bf16_ulp_stats(std::span<const BF16>(actual.data(), actual.size()),
                     std::span<const typename VR::value_type>(reference.data(), reference.size())),
      b);
}

}  // namespace weft::test
