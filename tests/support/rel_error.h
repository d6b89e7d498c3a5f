#pragma once
// The tests' one measure of how close a result is to its reference: ||a - b|| / ||b|| in double
// (||a - b|| when b is all zeros), over float, double or 16-bit (BF16, F16) elements. +inf when
// either side holds a NaN or an infinity, so an element a kernel left poisoned can never pass a
// tolerance.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>
#include <type_traits>

namespace weft::test {

template <typename T>
double to_double(T x) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<double>(x);
  } else {
    return static_cast<double>(x.to_float());  // weft::BF16, weft::F16
  }
}

template <typename A, typename B>
double rel_error(std::span<const A> a, std::span<const B> b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double x = to_double(a[i]), y = to_double(b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return std::numeric_limits<double>::infinity();
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// Any two contiguous containers (std::vector, std::span, ...).
template <typename VA, typename VB>
double rel_error(const VA& a, const VB& b) {
  return rel_error(std::span<const typename VA::value_type>(a.data(), a.size()),
                   std::span<const typename VB::value_type>(b.data(), b.size()));
}

}  // namespace weft::test
