#include "weft/schedule/send_buffers.h"

#include <algorithm>
#include <utility>

#include "weft/core/check.h"
#include "weft/schedule/schedule.h"

namespace weft::schedule {
namespace {

constexpr double kUnset = -1;

// One rank's outputs of one kind in program order: when each producer started and when its
// consumer took it (simulate.h), in an unbounded run.
struct Outputs {
  std::vector<double> produced, taken;
};

// The smallest K for which no output waits: output k's producer starts no earlier than output
// k - K was taken, for every k. Not monotone in K where consumers take outputs out of order, so
// each K is checked whole.
int fewest(const std::vector<Outputs>& runs) {
  const size_t n = runs.front().produced.size();
  if (n == 0) return 0;
  for (size_t K = 1;; ++K) {
    bool waits = false;
    for (const Outputs& o : runs) {
      for (size_t k = K; k < n && !waits; ++k) waits = o.taken[k - K] > o.produced[k];
    }
    if (!waits) return static_cast<int>(K);
  }
}

// Per rank: {activation outputs, input gradients}, from an unbounded timeline.
std::vector<std::pair<Outputs, Outputs>> outputs(const Schedule& schedule,
                                                 const Timeline& timeline) {
  const Shape& shape = schedule.shape;
  const int S = shape.num_stages(), m = shape.microbatches;
  // When each output was taken: by its receive, else at its consumer's start (as simulate's).
  std::vector<double> act_taken(S * m, kUnset), grad_taken(S * m, kUnset);
  auto take = [&](std::vector<double>& taken, int stage, int mb, double t) {
    double& at = taken[stage * m + mb];
    if (at == kUnset) at = t;
  };
  for (const auto& rank : timeline.ranks) {
    for (const Slot& slot : rank) {
      const Instr& in = slot.instr;
      if (in.op == Op::RecvAct) take(act_taken, in.stage - 1, in.microbatch, slot.end);
      if (in.op == Op::RecvGrad) take(grad_taken, in.stage + 1, in.microbatch, slot.end);
    }
  }
  for (const auto& rank : timeline.ranks) {
    for (const Slot& slot : rank) {
      const Instr& in = slot.instr;
      if (in.op == Op::Forward && in.stage > 0) {
        take(act_taken, in.stage - 1, in.microbatch, slot.start);
      }
      if ((in.op == Op::Backward || in.op == Op::BackwardInput) && in.stage < S - 1) {
        take(grad_taken, in.stage + 1, in.microbatch, slot.start);
      }
    }
  }
  std::vector<std::pair<Outputs, Outputs>> per_rank(shape.pp);
  for (int r = 0; r < shape.pp; ++r) {
    for (const Slot& slot : timeline.ranks[r]) {
      const Instr& in = slot.instr;
      const int at = in.stage * m + in.microbatch;
      if (in.op == Op::Forward && in.stage < S - 1) {
        per_rank[r].first.produced.push_back(slot.start);
        per_rank[r].first.taken.push_back(act_taken[at]);
      }
      if ((in.op == Op::Backward || in.op == Op::BackwardInput) && in.stage > 0) {
        per_rank[r].second.produced.push_back(slot.start);
        per_rank[r].second.taken.push_back(grad_taken[at]);
      }
    }
  }
  return per_rank;
}

}  // namespace

std::vector<SendBuffers> send_buffers(const Schedule& schedule) {
  const Status structure = check_structure(schedule);
  WEFT_CHECK(structure.ok(), structure.message("send_buffers: malformed schedule"));
  const Shape& shape = schedule.shape;
  bool messages = false;
  for (const Program& p : schedule.programs) {
    for (const Instr& in : p) messages = messages || is_p2p(in.op);
  }
  const Schedule lowered = messages || shape.pp == 1 ? schedule : add_communication(schedule);

  const Costs models[] = {
      unit_costs(shape),
      uniform_costs(shape, {.forward = 1, .backward = 2, .backward_input = 1, .backward_weight = 1},
                    /*p2p=*/0.25)};
  std::vector<std::vector<std::pair<Outputs, Outputs>>> runs;
  std::vector<double> makespans;
  for (const Costs& costs : models) {
    const Timeline t = simulate_checked(lowered, costs);
    WEFT_CHECK(!t.deadlocked(), "send_buffers: the schedule deadlocks with unbounded buffers");
    runs.push_back(outputs(lowered, t));
    makespans.push_back(t.makespan);
  }
  // First the counts under which no producer ever waits (the same run, instruction by
  // instruction).
  std::vector<SendBuffers> buffers(shape.pp);
  for (int r = 0; r < shape.pp; ++r) {
    std::vector<Outputs> acts, grads;
    for (const auto& run : runs) {
      acts.push_back(run[r].first);
      grads.push_back(run[r].second);
    }
    buffers[r] = {.activations = fewest(acts), .gradients = fewest(grads)};
  }
  // Then, where that is more than kFew, the fewest that still end the step when unbounded
  // buffers do: a producer may wait where the wait costs the step nothing (the interleaved
  // schedule's first rank sends its last chunk's input gradients faster than the last rank takes
  // them, in bursts of p microbatches: pp=64, vp=2 asked for 32, and 1 keeps the step). Times only
  // fall as K grows (fewer waits), so a binary search finds it. Ranks in order, each with the
  // counts found before it.
  auto same_step = [&](const std::vector<SendBuffers>& b) {
    for (size_t i = 0; i < std::size(models); ++i) {
      const Timeline t = simulate_checked(lowered, models[i], b);
      if (t.deadlocked() || t.makespan != makespans[i]) return false;
    }
    return true;
  };
  constexpr int kFew = 2;
  for (int r = 0; r < shape.pp; ++r) {
    for (int SendBuffers::*kind : {&SendBuffers::activations, &SendBuffers::gradients}) {
      int lo = 1, hi = buffers[r].*kind;  // hi keeps the step
      if (hi <= kFew) continue;
      while (lo < hi) {
        std::vector<SendBuffers> trial = buffers;
        trial[r].*kind = (lo + hi) / 2;
        if (same_step(trial)) {
          hi = trial[r].*kind;
        } else {
          lo = trial[r].*kind + 1;
        }
      }
      buffers[r].*kind = hi;
    }
  }
  return buffers;
}

}  // namespace weft::schedule
