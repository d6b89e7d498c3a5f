#pragma once
// A discrete-event simulator of a schedule: pure, shared by validate() (unit costs, to prove the
// schedule ends), format_grid() and the planner (measured or modelled costs).
//
// Model (docs/schedules.md, "Simulation"): each rank runs its program in order on one stream.
// A compute instruction starts when the rank is free and its inputs are there: F(s) needs
// F(s-1); B/I(s) needs F(s) and the input gradient of s+1 (its B or I); W(s) needs I(s). An
// input from another rank arrives p2p time after its producer ends, whether or not the schedule
// is lowered, so the two give the same times. A send takes no stream time (eager, buffered) but
// needs its producer to have run on this rank; a receive blocks until the matching send was
// posted plus p2p time. ReduceGrads and OptimizerStep occupy the stream for their cost.
//
// With send buffers (SendBuffers, one per rank; schedule/send_buffers.h says how many a rank
// gets): every stage output a rank produces (F of a stage but the last) and every input gradient
// (B or I of a stage but the first) is written into one of the rank's buffers of its kind, taken
// in turn: the k-th output of a kind uses buffer k mod K, and its producer starts only once the
// output k - K that held the buffer before was taken by its consumer (its receive ended, or, on
// this rank or in a schedule without messages, its consuming compute started; a compute reads its
// input before it writes its output, so it may take its input's buffer). The runtime
// (runtime/pipeline_runner.h) waits exactly so.

#include <span>
#include <string>
#include <vector>

#include "weft/schedule/instr.h"

namespace weft::schedule {

struct StageCosts {
  double forward = 1;
  double backward = 2;         // a full backward (Op::Backward)
  double backward_input = 1;   // Op::BackwardInput
  double backward_weight = 1;  // Op::BackwardWeight
};

struct Costs {
  std::vector<StageCosts> stages;  // indexed by global stage, size pp*vp
  double p2p = 0;                  // one activation or gradient message between ranks
  double reduce_grads = 0;         // per ReduceGrads instruction
  double optimizer_step = 0;
};

// Every stage costs `each`.
Costs uniform_costs(const Shape& shape, const StageCosts& each, double p2p = 0);
// Every F, B, I and W one time unit, messages free: the grid's clock, not a model of cost.
Costs unit_costs(const Shape& shape);

// One executed instruction. A receive's [start, end) is time spent waiting.
struct Slot {
  int index = 0;  // position in the rank's program
  Instr instr;
  double start = 0;
  double end = 0;
};

// An instruction that could never start, and what it waits for.
struct Blocked {
  int rank = 0;
  int index = 0;
  Instr instr;
  std::string waiting_for;  // e.g. "1B3 on rank 1, which never runs"
};

struct Timeline {
  Shape shape;
  std::vector<std::vector<Slot>> ranks;  // per rank, in program order
  double makespan = 0;                   // last end over all ranks
  std::vector<double> busy;              // per rank: stream time of F/B/I/W/R/O
  std::vector<double> idle;              // per rank: makespan - busy
  // Narayanan et al.'s bubble time fraction: total idle / total busy (= (pp-1)/m for 1F1B
  // with uniform stages), not idle / makespan.
  double bubble_fraction = 0;
  std::vector<Blocked> blocked;  // empty iff every program ran to its end
  bool deadlocked() const { return !blocked.empty(); }
};

// A pipeline rank's send buffers of each kind ([s b, h] activations each): stage outputs
// (`activations`) and input gradients (`gradients`). 0 where the rank produces none.
struct SendBuffers {
  int activations = 0;
  int gradients = 0;
  bool operator==(const SendBuffers&) const = default;
};

// Requires check_structure(schedule) and costs.stages.size() == pp*vp (WEFT_CHECK). A schedule
// that cannot finish yields the timeline up to the deadlock and the blocked instructions.
// `buffers`: empty (sends never wait: unbounded buffers), or one per rank.
Timeline simulate(const Schedule& schedule, const Costs& costs,
                  std::span<const SendBuffers> buffers = {});
// The same for a schedule whose structure was checked once already: the planner prices one
// schedule under thousands of configurations' costs, and the check was most of its search time.
Timeline simulate_checked(const Schedule& schedule, const Costs& costs,
                          std::span<const SendBuffers> buffers = {});
// Whether the programs (structure checked) run to their end under these buffers' waits: what
// does not depend on the costs, found without keeping a timeline (send_buffers' proof).
bool runs_to_end(const Schedule& schedule, std::span<const SendBuffers> buffers);

}  // namespace weft::schedule
