#include "weft/schedule/simulate.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "weft/schedule/schedule.h"
#include "weft/schedule/text.h"

namespace weft::schedule {
namespace {

constexpr double kNotYet = -1;  // times are >= 0

// Completion times per (stage, microbatch), indexed stage * m + microbatch.
struct Events {
  Events(int stages, int m)
      : m(m),
        forward(stages * m, kNotYet),
        input_grad(stages * m, kNotYet),
        act_sent(stages * m, kNotYet),
        grad_sent(stages * m, kNotYet),
        act_taken(stages * m, kNotYet),
        grad_taken(stages * m, kNotYet) {}
  int m;
  std::vector<double> forward;     // F ended
  std::vector<double> input_grad;  // B or I ended: the gradient w.r.t. the stage's input exists
  std::vector<double> act_sent;    // SendAct posted
  std::vector<double> grad_sent;   // SendGrad posted
  // The consumer took the stage's output (act) or input gradient (grad): its receive ended, or
  // its consuming compute started. Frees the send buffer it was in.
  std::vector<double> act_taken;
  std::vector<double> grad_taken;
  double& at(std::vector<double>& v, int stage, int mb) { return v[stage * m + mb]; }
};

// The send buffers' turns (simulate.h): per rank, the outputs of each kind in program order, and
// per (stage, microbatch) its output's place in that order.
struct Turns {
  Turns(const Schedule& schedule, std::span<const SendBuffers> buffers) : buffers(buffers) {
    if (buffers.empty()) return;
    const Shape& shape = schedule.shape;
    const int S = shape.num_stages(), m = shape.microbatches;
    WEFT_CHECK(static_cast<int>(buffers.size()) == shape.pp, "send buffers for ", buffers.size(),
               " ranks, the schedule has ", shape.pp);
    act_turn.assign(S * m, -1);
    grad_turn.assign(S * m, -1);
    acts.resize(shape.pp);
    grads.resize(shape.pp);
    for (int rank = 0; rank < shape.pp; ++rank) {
      for (const Instr& in : schedule.programs[rank]) {
        messages = messages || is_p2p(in.op);
        if (in.op == Op::Forward && in.stage < S - 1) {
          act_turn[in.stage * m + in.microbatch] = static_cast<int>(acts[rank].size());
          acts[rank].push_back({in.stage, in.microbatch});
        }
        if ((in.op == Op::Backward || in.op == Op::BackwardInput) && in.stage > 0) {
          grad_turn[in.stage * m + in.microbatch] = static_cast<int>(grads[rank].size());
          grads[rank].push_back({in.stage, in.microbatch});
        }
      }
    }
  }
  std::span<const SendBuffers> buffers;
  bool messages = false;  // lowered: a remote consumer takes its input by its receive
  std::vector<int> act_turn, grad_turn;
  std::vector<std::vector<std::pair<int, int>>> acts, grads;  // per rank: (stage, microbatch)
};

// What an instruction waits for: the producer it needs, and when the input is there.
struct Need {
  Instr producer;
  double ready = kNotYet;     // kNotYet while the producer has not run
  bool any_backward = false;  // producer is "B or I" of its (stage, microbatch)
};

// The inputs of `in` on `rank`, per the model in simulate.h; at most one is missing at a time,
// so it returns the first missing one, or the latest ready time of all.
Need needs(const Instr& in, int rank, const Schedule& schedule, const Turns& turns, Events& ev,
           double p2p) {
  const Shape& shape = schedule.shape;
  const int s = in.stage, mb = in.microbatch, last = shape.num_stages() - 1;
  auto from = [&](std::vector<double>& v, Op op, int stage, bool any_backward = false) {
    Need need{.producer = {op, stage, mb, -1}, .ready = kNotYet, .any_backward = any_backward};
    const double t = ev.at(v, stage, mb);
    if (t != kNotYet) need.ready = t + (shape.rank_of(stage) != rank ? p2p : 0);
    return need;
  };
  // The message, not the compute: a receive needs its send to be posted.
  auto posted = [&](std::vector<double>& v, Op send, int stage) {
    Need need{.producer = {send, stage, mb, rank}, .ready = kNotYet};
    if (const double t = ev.at(v, stage, mb); t != kNotYet) need.ready = t + p2p;
    return need;
  };
  Need ready{.producer = in, .ready = 0, .any_backward = false};
  auto combine = [&](const Need& need) {
    if (ready.ready == kNotYet) return;
    if (need.ready == kNotYet) {
      ready = need;
    } else {
      ready.ready = std::max(ready.ready, need.ready);
    }
  };
  const bool input_grad = in.op == Op::Backward || in.op == Op::BackwardInput;
  if (in.op == Op::Forward && s > 0) combine(from(ev.forward, Op::Forward, s - 1));
  if (input_grad || in.op == Op::SendAct) combine(from(ev.forward, Op::Forward, s));
  if (input_grad && s < last) {
    combine(from(ev.input_grad, Op::Backward, s + 1, /*any_backward=*/true));
  }
  if (in.op == Op::BackwardWeight) combine(from(ev.input_grad, Op::BackwardInput, s));
  if (in.op == Op::SendGrad) combine(from(ev.input_grad, Op::Backward, s, /*any_backward=*/true));
  if (in.op == Op::RecvAct) combine(posted(ev.act_sent, Op::SendAct, s - 1));
  if (in.op == Op::RecvGrad) combine(posted(ev.grad_sent, Op::SendGrad, s + 1));
  if (turns.buffers.empty()) return ready;
  // A producer's send buffer: free once the output that held it before was taken.
  auto buffer = [&](const std::pair<int, int>& before, bool act) {
    const auto [bs, bmb] = before;
    const int consumer = act ? bs + 1 : bs - 1;
    const bool remote = turns.messages && shape.rank_of(consumer) != rank;
    // This instruction itself takes it: it reads its input before it writes its output.
    if (!remote && consumer == s && bmb == mb) return;
    Need need{.producer = {act ? (remote ? Op::RecvAct : Op::Forward)
                               : (remote ? Op::RecvGrad : Op::Backward),
                           consumer, bmb, remote ? rank : -1},
              .ready = ev.at(act ? ev.act_taken : ev.grad_taken, bs, bmb),
              .any_backward = !act && !remote};
    combine(need);
  };
  if (in.op == Op::Forward && s < last) {
    const int k = turns.act_turn[s * ev.m + mb], K = turns.buffers[rank].activations;
    WEFT_CHECK(K > 0, "rank ", rank, " has no send buffer for the output of stage ", s);
    if (k >= K) buffer(turns.acts[rank][k - K], true);
  }
  if (input_grad && s > 0) {
    const int k = turns.grad_turn[s * ev.m + mb], K = turns.buffers[rank].gradients;
    WEFT_CHECK(K > 0, "rank ", rank, " has no send buffer for the input gradient of stage ", s);
    if (k >= K) buffer(turns.grads[rank][k - K], false);
  }
  return ready;
}

double duration(const Instr& in, const Costs& costs) {
  if (is_p2p(in.op)) return 0;  // a receive's wait is computed from its send, not a cost
  if (in.op == Op::ReduceGrads) return costs.reduce_grads;
  if (in.op == Op::OptimizerStep) return costs.optimizer_step;
  const StageCosts& s = costs.stages[in.stage];
  return in.op == Op::Forward         ? s.forward
         : in.op == Op::Backward      ? s.backward
         : in.op == Op::BackwardInput ? s.backward_input
                                      : s.backward_weight;
}

// Where the producer a blocked instruction needs is: "rank 1 has not reached it (blocked at
// #4 1RG1<2)", "later in this rank's program" or "no rank runs it".
std::string describe(const Need& need, int rank, const Schedule& schedule,
                     const std::vector<int>& pc) {
  const Shape& shape = schedule.shape;
  const Instr& p = need.producer;
  const int owner = shape.rank_of(p.stage);
  const Program& program = schedule.programs[owner];
  auto matches = [&](const Instr& in) {
    if (in.stage != p.stage || in.microbatch != p.microbatch) return false;
    if (need.any_backward) return in.op == Op::Backward || in.op == Op::BackwardInput;
    return in.op == p.op;
  };
  const std::string what =
      need.any_backward
          ? fmt::format("{} or {}", instr_to_text({Op::Backward, p.stage, p.microbatch}),
                        instr_to_text({Op::BackwardInput, p.stage, p.microbatch}))
          : instr_to_text(p);  // a receive's producer is its send, peer already this rank
  auto it = std::find_if(program.begin() + pc[owner], program.end(), matches);
  if (it == program.end()) return fmt::format("needs {}, which no rank runs", what);
  if (owner == rank) {
    return fmt::format("needs {}, which comes later in this rank's program (#{})", what,
                       it - program.begin());
  }
  return fmt::format("needs {} from rank {}, which never gets there (blocked at #{} {})", what,
                     owner, pc[owner], instr_to_text(program[pc[owner]]));
}

}  // namespace

Costs uniform_costs(const Shape& shape, const StageCosts& each, double p2p) {
  Costs costs;
  costs.stages.assign(shape.num_stages(), each);
  costs.p2p = p2p;
  return costs;
}

Costs unit_costs(const Shape& shape) {
  return uniform_costs(shape,
                       {.forward = 1, .backward = 1, .backward_input = 1, .backward_weight = 1}, 0);
}

namespace {

// simulate_checked, keeping each instruction's Slot only when asked (a check that the programs end
// needs none, and a planner search asks it of thousands of schedules).
Timeline run(const Schedule& schedule, const Costs& costs, std::span<const SendBuffers> buffers,
             bool keep_slots) {
  const Shape& shape = schedule.shape;
  WEFT_CHECK(static_cast<int>(costs.stages.size()) == shape.num_stages(), "costs for ",
             costs.stages.size(), " stages, the schedule has ", shape.num_stages());
  const int pp = shape.pp;

  Events ev(shape.num_stages(), shape.microbatches);
  const Turns turns(schedule, buffers);
  Timeline timeline;
  timeline.shape = shape;
  timeline.ranks.resize(pp);
  if (keep_slots) {
    for (int r = 0; r < pp; ++r) timeline.ranks[r].reserve(schedule.programs[r].size());
  }
  timeline.busy.assign(pp, 0);
  std::vector<int> pc(pp, 0);
  std::vector<double> free_at(pp, 0);

  // Advance every rank as far as its inputs allow, until nothing moves. Start times depend
  // only on the dependencies, not on the order ranks are visited, so this equals an event-
  // ordered simulation.
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < pp; ++rank) {
      const Program& program = schedule.programs[rank];
      while (pc[rank] < static_cast<int>(program.size())) {
        const Instr& in = program[pc[rank]];
        const Need need = needs(in, rank, schedule, turns, ev, costs.p2p);
        if (need.ready == kNotYet) break;
        Slot slot{.index = pc[rank], .instr = in, .start = free_at[rank], .end = 0};
        if (is_recv(in.op)) {
          slot.end = std::max(slot.start, need.ready);
        } else {
          slot.start = std::max(slot.start, need.ready);
          const double d = duration(in, costs);
          WEFT_CHECK(d >= 0, "negative cost for ", op_name(in.op));
          slot.end = slot.start + d;
          timeline.busy[rank] += d;
        }
        // A consumer takes its input: by its receive, else (this rank, or no messages) at
        // its start.
        auto take = [&](std::vector<double>& taken, int stage, double t) {
          double& at = ev.at(taken, stage, in.microbatch);
          if (at == kNotYet) at = t;
        };
        const int s = in.stage, mb = in.microbatch;
        const bool input_grad = in.op == Op::Backward || in.op == Op::BackwardInput;
        if (in.op == Op::Forward) ev.at(ev.forward, s, mb) = slot.end;
        if (input_grad) ev.at(ev.input_grad, s, mb) = slot.end;
        if (in.op == Op::SendAct) ev.at(ev.act_sent, s, mb) = slot.start;
        if (in.op == Op::SendGrad) ev.at(ev.grad_sent, s, mb) = slot.start;
        if (in.op == Op::Forward && s > 0) take(ev.act_taken, s - 1, slot.start);
        if (input_grad && s < shape.num_stages() - 1) take(ev.grad_taken, s + 1, slot.start);
        if (in.op == Op::RecvAct) take(ev.act_taken, s - 1, slot.end);
        if (in.op == Op::RecvGrad) take(ev.grad_taken, s + 1, slot.end);
        free_at[rank] = slot.end;
        if (keep_slots) timeline.ranks[rank].push_back(slot);
        ++pc[rank];
        progress = true;
      }
    }
  }

  for (int rank = 0; rank < pp; ++rank) {
    timeline.makespan = std::max(timeline.makespan, free_at[rank]);
    const Program& program = schedule.programs[rank];
    if (pc[rank] < static_cast<int>(program.size())) {
      const Instr& in = program[pc[rank]];
      const Need need = needs(in, rank, schedule, turns, ev, costs.p2p);
      timeline.blocked.push_back({.rank = rank,
                                  .index = pc[rank],
                                  .instr = in,
                                  .waiting_for = describe(need, rank, schedule, pc)});
    }
  }
  timeline.idle.resize(pp);
  for (int rank = 0; rank < pp; ++rank) {
    timeline.idle[rank] = timeline.makespan - timeline.busy[rank];
  }
  const double busy = std::accumulate(timeline.busy.begin(), timeline.busy.end(), 0.0);
  const double idle = std::accumulate(timeline.idle.begin(), timeline.idle.end(), 0.0);
  timeline.bubble_fraction = busy > 0 ? idle / busy : 0;
  return timeline;
}

}  // namespace

Timeline simulate(const Schedule& schedule, const Costs& costs,
                  std::span<const SendBuffers> buffers) {
  const Status structure = check_structure(schedule);
  WEFT_CHECK(structure.ok(), structure.message("simulate: malformed schedule"));
  return simulate_checked(schedule, costs, buffers);
}

Timeline simulate_checked(const Schedule& schedule, const Costs& costs,
                          std::span<const SendBuffers> buffers) {
  return run(schedule, costs, buffers, /*keep_slots=*/true);
}

bool runs_to_end(const Schedule& schedule, std::span<const SendBuffers> buffers) {
  return !run(schedule, unit_costs(schedule.shape), buffers, /*keep_slots=*/false).deadlocked();
}

}  // namespace weft::schedule
