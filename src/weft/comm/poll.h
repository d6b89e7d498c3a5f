// How a communicator waits for a request it can only test (MPI_Test, ncclCommGetAsyncError,
// cudaEventQuery): one poller for all of them.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#include "weft/core/clock.h"

namespace weft::comm {

// First it spins (an op that is nearly done costs no scheduling round trip), then it yields after
// each test (a peer on this core gets it at once), and after that it naps between tests, doubling
// the nap up to kMaxNap, so a rank waiting for a slow peer leaves the CPU to the ranks that
// compute. Measured on 2 cores with 2 and 4 ranks (1M-float all-reduce): spinning 1 ms before
// yielding beat 50-300 us on 2 ranks, and 2-5 ms was 2x slower on 4.
struct PollPolicy {
  static constexpr auto kSpinFor = std::chrono::microseconds(1000);
  static constexpr auto kYieldFor = std::chrono::milliseconds(5);
  static constexpr auto kFirstNap = std::chrono::microseconds(10);
  static constexpr auto kMaxNap = std::chrono::microseconds(200);
};

// Calls done() until it returns true (then returns true) or `timeout_s` has passed (false).
// done() may throw; the exception passes through.
template <typename Done>
bool poll_until(double timeout_s, Done&& done) {
  const auto start = SteadyClock::now();
  auto nap = PollPolicy::kFirstNap;
  for (;;) {
    if (done()) return true;
    const auto elapsed = SteadyClock::now() - start;
    if (elapsed < PollPolicy::kSpinFor) continue;
    if (elapsed >= std::chrono::duration<double>(timeout_s)) return false;
    if (elapsed < PollPolicy::kYieldFor) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, PollPolicy::kMaxNap);
    }
  }
}

}  // namespace weft::comm
