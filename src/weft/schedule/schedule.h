#pragma once
// Pipeline schedules: generators, lowering to point-to-point communication, validation.
// docs/schedules.md derives every formula the tests assert.
//
//   Result<Schedule> s = make_schedule(Kind::OneFOneB, {.pp = 4, .vp = 1, .microbatches = 8});
//   Schedule lowered = add_communication(std::move(s).value_or_throw());
//   validate(lowered).throw_if_error("invalid schedule");

#include <span>
#include <vector>

#include "weft/core/status.h"
#include "weft/schedule/instr.h"

namespace weft::schedule {

// pp, vp and microbatches are each at least 1, and pp*vp*microbatches is not absurdly large.
Status check_sizes(const Shape& shape);

// Every reason `kind` cannot be generated for `shape`, collected in one Status (pp < 1, vp < 1,
// microbatches < 1, vp > 1 for a kind without model chunks, interleaved with vp < 2 or
// microbatches not a multiple of pp, fewer microbatches than pp for 1f1b/interleaved/zb-h1).
Status check_shape(Kind kind, const Shape& shape);

// The compute-only schedule (F/B/I/W instructions, peer -1): pure, deterministic.
//   gpipe        all forwards, then all backwards (Huang et al., 2019)
//   1f1b         PipeDream-Flush: warm-up forwards, one-forward-one-backward, cool-down
//                (Narayanan et al., SC'21, §2.2.1)
//   interleaved  1F1B over vp model chunks per rank, Megatron's order (Narayanan et al., §2.2.2)
//   zb-h1        1F1B with the backward split into I and W, W deferred by r on rank r
//                (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24, ZB-H1)
Result<Schedule> make_schedule(Kind kind, const Shape& shape);

// Lowers a compute-only schedule: a RecvAct/RecvGrad right before each compute that consumes
// another rank's output, a SendAct/SendGrad right after each compute whose output another rank
// consumes. Sends are eager (buffered), receives block: see docs/schedules.md, "Communication".
Schedule add_communication(Schedule schedule);

// Appends the end of a training step: ReduceGrads(s) right after the last instruction of local
// stage s (its last weight gradient and the send that follows it), so a chunk's data-parallel
// reduction can start while other chunks still run backward, then one OptimizerStep per rank.
Schedule add_optimizer_step(Schedule schedule);

// The shape and every instruction's fields are in range (stage on its rank, microbatch < m,
// peers of sends/receives right). simulate() and peak_in_flight() require this.
Status check_structure(const Schedule& schedule);

// Every invariant, every problem listed: check_structure(); each (stage, microbatch) has one F
// and either one B or one I and one W; on a rank B/I(s) after F(s), W after I, and (when the
// neighbours share the rank) F(s) after F(s-1), B(s) after B(s+1); if the schedule has any
// send/receive, every cross-rank dependency has exactly one matched send (after its producer)
// and receive (before its consumer); ReduceGrads after the stage's last weight gradient;
// OptimizerStep once, last; the running count of forwards minus backwards on a rank never
// negative; and a unit-cost simulation that ends, else the instructions that would block.
Status validate(const Schedule& schedule);

// Per rank, the most (stage, microbatch) pairs whose forward has run and whose last backward
// pass (B, or W when split) has not, walking the program in order: the activation memory in
// units of one stage's activations for one microbatch. Requires check_structure().
std::vector<int> peak_in_flight(const Schedule& schedule);
// The same for groups of the model chunks j of `rank` (stage rank + j*pp) that share their slots
// (group_of_chunk[j], numbered from 0): per group, the most pairs of its chunks in flight at once,
// the activation slots the group needs. One group of every chunk
// is peak_in_flight()[rank]: the chunks' own peaks fall at different times (interleaved pp 35,
// vp 3, m 280, rank 0: 139 at once against 174 summed).
std::vector<int> peak_in_flight_per_group(const Schedule& schedule, int rank,
                                          std::span<const int> group_of_chunk);
// The same for every rank at once ([rank][group], group_of_chunk[rank][j]), checking the structure
// once: the planner asks for every rank of every candidate's schedule.
std::vector<std::vector<int>> peak_in_flight_per_group(
    const Schedule& schedule, const std::vector<std::vector<int>>& group_of_chunk);

}  // namespace weft::schedule
