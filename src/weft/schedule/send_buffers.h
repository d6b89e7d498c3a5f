#pragma once
// How many send buffers a pipeline rank needs (docs/schedules.md §4, "Send buffers"): a pure
// function of the schedule, which the runtime allocates and the memory model counts.
//
// A rank writes every stage output that leaves its stage, and every input gradient, into one of
// its SendBuffers of that kind, taken in turn (simulate.h): a producer starts only once the
// output that held its buffer K turns before was taken. The count is bounded by what the schedule
// keeps in flight, never by the number of microbatches: a send's buffer comes back as soon as its
// receive ends (Megatron-LM frees a sent tensor then too). send_buffers picks, per rank and kind,
// the smallest K under which the schedule runs exactly as with unbounded buffers, under unit costs
// and under F:B = 1:2 with a p2p time of a quarter of a forward. Under it the programs cannot
// deadlock whatever the real costs: whether a program can block depends only on which
// instructions wait for which, and a larger K only drops waits (output k's wait for k - K' is
// implied by k - K' + K's for k - K and the program's order).

#include <vector>

#include "weft/schedule/instr.h"
#include "weft/schedule/simulate.h"

namespace weft::schedule {

// Per rank. `schedule`: compute-only (lowered here: the buffers are the lowered program's) or
// lowered, with or without the step's end; its structure must check.
std::vector<SendBuffers> send_buffers(const Schedule& schedule);

}  // namespace weft::schedule
