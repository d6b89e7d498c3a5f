// route_stop_signals(): no thread but the waiting one may take SIGINT/SIGTERM (a handler on a
// thread inside oneDNN's JIT GEMM corrupts the heap: core/stop_signals.h), a listener hears the
// first, and everything else keeps the default action. Each test runs in a fresh process (death
// tests, "threadsafe" style), since routing changes the process for good.

#include "weft/core/stop_signals.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

namespace weft {
namespace {

bool blocked_here(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, sig) == 1;
}

// Waits up to 10 s for `flag`; true if it was set.
bool wait_for(const std::atomic<bool>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!flag.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return flag.load();
}

class StopSignalsTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// Routes the signals, then exits 0 if no thread but the waiting one can take them.
[[noreturn]] void route_and_check_every_thread() {
  route_stop_signals();
  bool ok = blocked_here(SIGINT) && blocked_here(SIGTERM) && blocked_here(SIGUSR1) &&
            stop_signals_routed();
  // OpenMP workers (where oneDNN's kernels run) and any other thread started later.
  std::vector<int> worker_ok(4, 0);
#pragma omp parallel num_threads(4)
  worker_ok[static_cast<size_t>(omp_get_thread_num())] =
      blocked_here(SIGINT) && blocked_here(SIGTERM) && blocked_here(SIGUSR1);
  for (int w : worker_ok) ok = ok && w == 1;
  std::thread([&] { ok = ok && blocked_here(SIGINT) && blocked_here(SIGTERM); }).join();
  std::_Exit(ok ? 0 : 1);
}

TEST_F(StopSignalsTest, NoComputeThreadCanTakeTheSignals) {
  EXPECT_EXIT(route_and_check_every_thread(), ::testing::ExitedWithCode(0), "");
}

TEST_F(StopSignalsTest, AListenerHearsTheFirstSignalAndTheSecondEndsTheProcess) {
  EXPECT_EXIT(
      {
        route_stop_signals();
        std::atomic<bool> stop{false};
        StopSignalListener listener(&stop);
        kill(getpid(), SIGTERM);
        if (!wait_for(stop) || listener.signal() != SIGTERM) std::_Exit(1);
        kill(getpid(), SIGINT);  // a second request: the user does not want to wait
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(2);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

// mpirun forwards SIGUSR1 to its ranks (SIGTERM it turns into a kill): a stop request too.
TEST_F(StopSignalsTest, SigUsr1IsAStopRequestLikeSigTerm) {
  EXPECT_EXIT(
      {
        route_stop_signals();
        std::atomic<bool> stop{false};
        StopSignalListener listener(&stop);
        kill(getpid(), SIGUSR1);
        std::_Exit(wait_for(stop) && listener.signal() == SIGUSR1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(StopSignalsTest, WithoutAListenerASignalHasItsDefaultAction) {
  EXPECT_EXIT(
      {
        route_stop_signals();
        {
          std::atomic<bool> stop{false};
          StopSignalListener listener(&stop);
        }  // the training loop is over
        kill(getpid(), SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(2);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

}  // namespace
}  // namespace weft
