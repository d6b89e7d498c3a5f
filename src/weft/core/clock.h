#pragma once
// Wall time on the steady clock: the one way weft times a span.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace weft {

using SteadyClock = std::chrono::steady_clock;

// Seconds from t0 to now.
inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// The median of timings or rates: the upper one of an even count (of two, the slower time); 0 for
// none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace weft
