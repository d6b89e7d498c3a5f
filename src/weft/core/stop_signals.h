#pragma once
// SIGINT, SIGTERM and SIGUSR1 (what mpirun forwards to its ranks: docs/slurm.md), delivered to
// one thread that waits for them, never to a compute thread.
//
// Why no handler: oneDNN's JIT SGEMM kernels (2.6, Debian 12) use rsp as a general register,
// pointing into a heap buffer. A signal handler that runs on a thread inside such a kernel has
// its frame (registers, the AVX-512 state) written by the kernel below that rsp: over the heap. A
// core dump of a `weft train` stopped by ^C showed exactly that (the frame's "EXPF" magic and the
// interrupted rip inside the JIT code) and a corrupt malloc chunk, in about 1 run in 30.
//
// So the process blocks these signals before it starts any thread, every thread inherits the
// mask, and one thread takes them with sigwait(). A command listens while it runs; a signal with
// no listener, or a second one, gets the default action (the process ends), as ^C expects.
//
// A job's ranks hear one stop signal at different moments (Slurm signals a step's tasks one after
// another) and agree to stop after the same step. A rank that hears it late, while it saves or
// in MPI_Finalize, is stopping already: a command that runs over MPI listens from before MPI
// starts until it ends, so the late signal finds a listener. (`weft train` under srun was killed
// by exactly this: rank 0 heard SIGTERM after the trainer's listener had gone.)

#include <atomic>

namespace weft {

// Call first in main(), before any thread exists (OpenMP, MPI): threads created earlier keep
// the signals unblocked. Idempotent.
void route_stop_signals();

// Whether route_stop_signals() ran: only then can a StopSignalListener hear anything.
bool stop_signals_routed();

// While alive, the first SIGINT/SIGTERM/SIGUSR1 is heard (signal() tells which; `flag`, when
// given, is set); a second gets the default action. One listener at a time.
class StopSignalListener {
 public:
  explicit StopSignalListener(std::atomic<bool>* flag = nullptr);
  ~StopSignalListener();
  StopSignalListener(const StopSignalListener&) = delete;
  StopSignalListener& operator=(const StopSignalListener&) = delete;

  int signal() const;  // SIGINT, SIGTERM or SIGUSR1 once heard, else 0
  bool heard() const { return signal() != 0; }

 private:
  std::atomic<int> signal_{0};
  std::atomic<bool>* flag_ = nullptr;
  friend void deliver_stop_signal(int sig);
};

}  // namespace weft
