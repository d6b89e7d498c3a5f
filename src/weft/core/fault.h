#pragma once
// Fault injection for the crash tests: a process dies (SIGKILL, no cleanup, as a machine that
// fails), or gets a signal, at a named point when the environment asks for it:
//   WEFT_FAULT=<point>:<index>[:<rank>[:<signal>]][,...]
//     "step:5:1"          kills world rank 1 as step 5 begins
//     "save:6:0"          kills rank 0 halfway through writing the checkpoint of step 6
//     "step:3:1:TERM,save:3:0:TERM"
//                         SIGTERM to rank 1 as step 3 begins, and to rank 0 only while it saves:
//                         one stop signal that reaches a job's ranks at different moments
// A signal other than KILL (TERM, INT, USR1) goes to the process, as a launcher sends it, and the
// point waits until the process has taken it (core/stop_signals.h) before it goes on. STOP stops
// the process where it is, as a hung rank: "step:5:3:STOP".
// Other faults are acted out by the code that asks fault_requested(): "nan:<step>[:<rank>]"
// poisons a parameter of that rank after the step (runtime/trainer.cc).
// The rank is the launcher's (OMPI_COMM_WORLD_RANK; 0 without mpirun); without it every rank
// dies. Unset (always, outside tests) this costs one cached getenv.

#include <cstdint>
#include <string_view>

namespace weft {

void fault_point(std::string_view point, int64_t index);
bool fault_requested(std::string_view point, int64_t index);
// The index of this rank's fault at `point`, or -1: a value rather than a moment, as in
// "slow:30:1" (world rank 1 spends 30 ms more in each step: runtime/step_loop.cc).
int64_t fault_value(std::string_view point);

}  // namespace weft
