#pragma once
// Wall time on the steady clock: the one way weft times a span.

#include <chrono>

namespace weft {

using SteadyClock = std::chrono::steady_clock;

// Seconds from t0 to now.
inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace weft
