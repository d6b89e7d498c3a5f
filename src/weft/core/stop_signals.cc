#include "weft/core/stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <mutex>
#include <thread>

namespace weft {
namespace {

std::mutex g_mu;
StopSignalListener* g_listener = nullptr;  // guarded by g_mu
std::atomic<bool> g_routed{false};

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  // Open MPI's mpirun forwards SIGUSR1 to every rank (and turns SIGTERM into a kill after 1 s):
  // the signal that preempts an mpirun job cleanly (docs/slurm.md).
  sigaddset(&set, SIGUSR1);
  return set;
}

// What the signal would have done without us: SIG_DFL ends the process for each of them (with
// the usual "killed by signal" status a shell and mpirun report).
[[noreturn]] void default_action(int sig) {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
  _exit(128 + sig);  // not reached: the default action of these signals is to terminate
}

}  // namespace

void deliver_stop_signal(int sig) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_listener != nullptr && g_listener->signal_.load() == 0) {
    g_listener->signal_.store(sig);
    if (g_listener->flag_ != nullptr) g_listener->flag_->store(true);
    return;
  }
  default_action(sig);
}

void route_stop_signals() {
  if (g_routed.exchange(true)) return;
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by every thread created from now on
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) deliver_stop_signal(sig);
    }
  }).detach();
}

bool stop_signals_routed() { return g_routed.load(); }

StopSignalListener::StopSignalListener(std::atomic<bool>* flag) : flag_(flag) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_listener = this;
}

StopSignalListener::~StopSignalListener() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_listener == this) g_listener = nullptr;
}

int StopSignalListener::signal() const { return signal_.load(); }

}  // namespace weft
