#pragma once
// How many send buffers a pipeline rank needs (docs/schedules.md §4, "Send buffers"): a pure
// function of the schedule, which the runtime allocates and the memory model counts.
//
// A rank writes every stage output that leaves its stage, and every input gradient, into one of
// its SendBuffers of that kind, taken in turn (simulate.h): a producer starts only once the
// output that held its buffer K turns before was taken. Two of a kind let one send be in flight
// while the next output is written (Megatron-LM frees a sent tensor once its send completes
// too); the count is bounded by what the schedule keeps in flight, never by the number of
// microbatches. Whether the programs can deadlock under the buffers' waits depends only on which
// instruction waits for which, not on the costs, so one simulation proves it for any machine;
// and a larger K only drops waits (output k's wait for k - K' is implied by k - K' + K's for
// k - K and the program's order), so the count stays safe where it is rounded up. What the waits
// cost a step is priced by the planner, which simulates each configuration with them
// (planner/simulate.cc): on every schedule weft generates, the step of unit costs and of
// F:B = 1:2 with messages a quarter of a forward is the unbounded one's
// (schedule_send_buffers_test).

#include <vector>

#include "weft/schedule/instr.h"
#include "weft/schedule/simulate.h"

namespace weft::schedule {

// Two per rank per kind it produces (0 where it produces none), more, every rank alike, where two
// would deadlock. `schedule`: compute-only (lowered here: the buffers are the lowered program's)
// or lowered, with or without the step's end; its structure must check.
inline constexpr int kDoubleBuffered = 2;
std::vector<SendBuffers> send_buffers(const Schedule& schedule);

}  // namespace weft::schedule
