// validate(): every invariant of a schedule, every problem reported (DESIGN.md §5), then a
// unit-cost simulation that must end (DESIGN.md §1.3: a schedule that deadlocks is rejected
// before any process starts).

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "weft/schedule/schedule.h"
#include "weft/schedule/simulate.h"
#include "weft/schedule/text.h"

namespace weft::schedule {
namespace {

// Enough to read; a broken generator would otherwise print thousands of lines.
constexpr int kMaxProblems = 60;

class Problems {
 public:
  template <typename... Args>
  void add(fmt::format_string<Args...> f, Args&&... args) {
    status_.add(fmt::format(f, std::forward<Args>(args)...));
  }
  bool ok() const { return status_.ok(); }
  Status take() const { return status_.capped(kMaxProblems); }

 private:
  Status status_;
};

std::string at(int rank, int index, const Instr& in) {
  return fmt::format("rank {} #{} {}", rank, index, instr_to_text(in));
}

// Count and first program position of every (op, stage, microbatch), indexed by the op: the ops
// with a microbatch are Op's first names, Forward .. RecvGrad. Positions are on the stage's own
// rank.
struct Index {
  Index(int stages, int m) : m(m) {
    for (auto& c : count) c.assign(stages * m, 0);
    for (auto& p : pos) p.assign(stages * m, -1);
  }
  int m;
  std::array<std::vector<int>, static_cast<int>(Op::ReduceGrads)> count, pos;
  int n(Op op, int stage, int mb) const { return count[static_cast<int>(op)][stage * m + mb]; }
  int where(Op op, int stage, int mb) const { return pos[static_cast<int>(op)][stage * m + mb]; }
};

}  // namespace

Status check_structure(const Schedule& schedule) {
  Problems problems;
  const Shape& shape = schedule.shape;
  if (Status sizes = check_sizes(shape); !sizes.ok()) return sizes;
  if (static_cast<int>(schedule.programs.size()) != shape.pp) {
    problems.add("{} programs for pp={} (one per pipeline rank)", schedule.programs.size(),
                 shape.pp);
    return problems.take();
  }
  const int stages = shape.num_stages(), m = shape.microbatches;
  for (int rank = 0; rank < shape.pp; ++rank) {
    const Program& program = schedule.programs[rank];
    for (int i = 0; i < static_cast<int>(program.size()); ++i) {
      const Instr& in = program[i];
      const int s = in.stage;
      if (in.op == Op::OptimizerStep) {
        if (s != -1 || in.microbatch != -1 || in.peer != -1) {
          problems.add("rank {} #{}: OptimizerStep takes no stage, microbatch or peer", rank, i);
        }
        continue;
      }
      if (s < 0 || s >= stages) {
        problems.add("rank {} #{} {}: stage {} is outside 0..{}", rank, i, op_name(in.op), s,
                     stages - 1);
        continue;
      }
      if (shape.rank_of(s) != rank) {
        problems.add("{}: stage {} lives on rank {} (stage % pp), not {}", at(rank, i, in), s,
                     shape.rank_of(s), rank);
      }
      if (has_microbatch(in.op) && (in.microbatch < 0 || in.microbatch >= m)) {
        problems.add("rank {} #{} {}: microbatch {} is outside 0..{}", rank, i, op_name(in.op),
                     in.microbatch, m - 1);
        continue;
      }
      if (!has_microbatch(in.op) && in.microbatch != -1) {
        problems.add("rank {} #{}: {} takes no microbatch", rank, i, op_name(in.op));
      }
      if (!is_p2p(in.op)) {
        if (in.peer != -1) problems.add("{}: only sends and receives have a peer", at(rank, i, in));
        continue;
      }
      // The stage at the other end of the message, and whether it exists.
      const bool towards_next = in.op == Op::SendAct || in.op == Op::RecvGrad;
      const int other = towards_next ? s + 1 : s - 1;
      if (other < 0 || other >= stages) {
        problems.add("{}: stage {} has no {} stage to {}", at(rank, i, in), s,
                     towards_next ? "next" : "previous",
                     is_send(in.op) ? "send to" : "receive from");
      } else if (in.peer != shape.rank_of(other)) {
        problems.add("{}: the peer must be rank {} (the rank of stage {})", at(rank, i, in),
                     shape.rank_of(other), other);
      } else if (in.peer == rank) {
        problems.add("{}: stages {} and {} share rank {}, no message is needed", at(rank, i, in), s,
                     other, rank);
      }
    }
  }
  return problems.take();
}

namespace {

// validate()'s checks after the structure's, one method per invariant, over one pass's index of
// the programs.
class Checker {
 public:
  explicit Checker(const Schedule& schedule)
      : schedule_(schedule),
        shape_(schedule.shape),
        pp_(shape_.pp),
        stages_(shape_.num_stages()),
        m_(shape_.microbatches),
        index_(stages_, m_),
        reduce_count_(stages_, 0),
        reduce_pos_(stages_, -1),
        step_count_(pp_, 0) {
    scan();
  }

  Status run() {
    check_once();
    if (lowered_) check_pairs();
    check_order();
    if (any_step_op_) check_step_end();
    check_running();
    if (problems_.ok()) check_deadlock();
    return problems_.take();
  }

 private:
  void scan() {
    for (int rank = 0; rank < pp_; ++rank) {
      const Program& program = schedule_.programs[rank];
      for (int i = 0; i < static_cast<int>(program.size()); ++i) {
        const Instr& in = program[i];
        lowered_ = lowered_ || is_p2p(in.op);
        if (in.op == Op::ReduceGrads) {
          any_step_op_ = true;
          if (reduce_count_[in.stage]++ == 0) reduce_pos_[in.stage] = i;
          continue;
        }
        if (in.op == Op::OptimizerStep) {
          any_step_op_ = true;
          ++step_count_[rank];
          if (i + 1 != static_cast<int>(program.size())) {
            problems_.add("{}: OptimizerStep must be the rank's last instruction", at(rank, i, in));
          }
          continue;
        }
        const int k = static_cast<int>(in.op), key = in.stage * m_ + in.microbatch;
        if (index_.count[k][key]++ == 0) index_.pos[k][key] = i;
      }
    }
  }

  // An instruction as text, with the peer a send or receive of stage s must have.
  std::string text(Op op, int s, int mb) const {
    int peer = -1;
    if (op == Op::SendAct || op == Op::RecvGrad) peer = shape_.rank_of(s + 1);
    if (op == Op::RecvAct || op == Op::SendGrad) peer = shape_.rank_of(s - 1);
    return instr_to_text({op, s, mb, peer});
  }
  // The stage's gradient pass of microbatch mb: B, or the I of a split backward.
  Op grad_op(int s, int mb) const {
    return index_.n(Op::Backward, s, mb) > 0 ? Op::Backward : Op::BackwardInput;
  }

  // Exactly once.
  void check_once() {
    for (int s = 0; s < stages_; ++s) {
      for (int mb = 0; mb < m_; ++mb) {
        if (const int f = index_.n(Op::Forward, s, mb); f != 1) {
          problems_.add("stage {} microbatch {}: {} forwards (needs exactly one {})", s, mb, f,
                        text(Op::Forward, s, mb));
        }
        const int b = index_.n(Op::Backward, s, mb), bi = index_.n(Op::BackwardInput, s, mb),
                  bw = index_.n(Op::BackwardWeight, s, mb);
        if (!((b == 1 && bi == 0 && bw == 0) || (b == 0 && bi == 1 && bw == 1))) {
          problems_.add(
              "stage {} microbatch {}: {} B, {} I, {} W (needs one B, or one I and one W)", s, mb,
              b, bi, bw);
        }
      }
    }
  }

  // Every send has its receive: one pair per cross-rank edge, once the schedule is lowered.
  void check_pairs() {
    for (int s = 0; s + 1 < stages_; ++s) {
      for (int mb = 0; mb < m_; ++mb) {
        pair(Op::SendAct, s, Op::RecvAct, s + 1, mb);
        pair(Op::SendGrad, s + 1, Op::RecvGrad, s, mb);
      }
    }
  }
  void pair(Op send, int from, Op recv, int to, int mb) {
    const int ns = index_.n(send, from, mb), nr = index_.n(recv, to, mb);
    const int rf = shape_.rank_of(from), rt = shape_.rank_of(to);
    const std::string st = text(send, from, mb), rc = text(recv, to, mb);
    if (ns == 1 && nr == 1) return;
    if (ns == 1 && nr == 0) {
      problems_.add("{} on rank {} has no matching receive {} on rank {}", st, rf, rc, rt);
    } else if (ns == 0 && nr == 1) {
      problems_.add("{} on rank {} has no matching send {} on rank {}", rc, rt, st, rf);
    } else if (ns == 0 && nr == 0) {
      problems_.add(
          "stage {} microbatch {} needs stage {}'s output from rank {} but has no "
          "message ({} / {})",
          to, mb, from, rf, st, rc);
    } else {
      problems_.add("{} sends {} and {} receives {} (needs one of each)", ns, st, nr, rc);
    }
  }

  // Order on a rank, for the pairs that are present (absences were reported above).
  void before(Op first, int s1, Op second, int s2, int mb, std::string_view why) {
    const int p1 = index_.where(first, s1, mb), p2 = index_.where(second, s2, mb);
    if (p1 < 0 || p2 < 0 || p1 < p2) return;
    problems_.add("rank {}: {} (#{}) runs before {} (#{}), {}", shape_.rank_of(s2),
                  text(second, s2, mb), p2, text(first, s1, mb), p1, why);
  }
  void check_order() {
    for (int s = 0; s < stages_; ++s) {
      for (int mb = 0; mb < m_; ++mb) {
        const Op grad = grad_op(s, mb);
        before(Op::Forward, s, grad, s, mb, "which it needs");
        before(Op::BackwardInput, s, Op::BackwardWeight, s, mb, "which it needs");
        if (pp_ == 1 && s > 0) before(Op::Forward, s - 1, Op::Forward, s, mb, "which it needs");
        if (pp_ == 1 && s + 1 < stages_) {
          before(grad_op(s + 1, mb), s + 1, grad, s, mb, "which it needs");
        }
        if (lowered_ && s > 0) before(Op::RecvAct, s, Op::Forward, s, mb, "its input");
        if (lowered_ && s + 1 < stages_) {
          before(Op::Forward, s, Op::SendAct, s, mb, "the activation it sends");
          before(Op::RecvGrad, s, grad, s, mb, "its output gradient");
        }
        if (lowered_ && s > 0) before(grad, s, Op::SendGrad, s, mb, "the gradient it sends");
      }
    }
  }

  // The end of the step: once any rank has one, every stage reduces once after its last
  // weight gradient, and every rank steps once, last.
  void check_step_end() {
    for (int s = 0; s < stages_; ++s) {
      if (reduce_count_[s] != 1) {
        problems_.add("stage {}: {} ReduceGrads (needs one, after its last weight gradient)", s,
                      reduce_count_[s]);
        continue;
      }
      for (int mb = 0; mb < m_; ++mb) {
        for (Op op : {Op::Backward, Op::BackwardWeight}) {
          const int p = index_.where(op, s, mb);
          if (p > reduce_pos_[s]) {
            problems_.add("rank {}: {} (#{}) runs before {} (#{}), whose gradient it reduces",
                          shape_.rank_of(s), text(Op::ReduceGrads, s, -1), reduce_pos_[s],
                          text(op, s, mb), p);
          }
        }
      }
    }
    for (int rank = 0; rank < pp_; ++rank) {
      if (step_count_[rank] != 1) {
        problems_.add("rank {}: {} OptimizerStep (needs one, last)", rank, step_count_[rank]);
      }
    }
  }

  // Running forwards minus backwards never negative on any rank.
  void check_running() {
    for (int rank = 0; rank < pp_; ++rank) {
      const Program& program = schedule_.programs[rank];
      int running = 0;
      for (int i = 0; i < static_cast<int>(program.size()); ++i) {
        const Op op = program[i].op;
        running += op == Op::Forward ? 1 : (op == Op::Backward || op == Op::BackwardInput) ? -1 : 0;
        if (running < 0) {
          problems_.add("{}: more backwards than forwards have run on this rank",
                        at(rank, i, program[i]));
          break;
        }
      }
    }
  }

  // Deadlock freedom: sends are eager, receives block (docs/schedules.md).
  void check_deadlock() {
    const Timeline timeline = simulate(schedule_, unit_costs(shape_));
    if (!timeline.deadlocked()) return;
    problems_.add("deadlock: {} of {} ranks wait forever (sends eager, receives blocking)",
                  timeline.blocked.size(), pp_);
    for (const Blocked& b : timeline.blocked) {
      problems_.add("{} blocks: {}", at(b.rank, b.index, b.instr), b.waiting_for);
    }
  }

  const Schedule& schedule_;
  const Shape& shape_;
  const int pp_, stages_, m_;
  Index index_;
  std::vector<int> reduce_count_, reduce_pos_;  // per stage
  std::vector<int> step_count_;                 // per rank
  bool lowered_ = false, any_step_op_ = false;
  Problems problems_;
};

}  // namespace

Status validate(const Schedule& schedule) {
  if (Status structure = check_structure(schedule); !structure.ok()) return structure;
  return Checker(schedule).run();
}

namespace {

void check_well_formed(const Schedule& schedule, std::string_view caller) {
  const Status structure = check_structure(schedule);
  WEFT_CHECK(structure.ok(), structure.message(fmt::format("{}: malformed schedule", caller)));
}

// peak_in_flight_per_group of one rank of a schedule whose structure was checked.
std::vector<int> group_peaks(const Schedule& schedule, int rank, std::span<const int> group_of) {
  WEFT_CHECK(static_cast<int>(group_of.size()) == schedule.shape.vp, "groups for ", group_of.size(),
             " chunks, the schedule has ", schedule.shape.vp);
  const int groups = group_of.empty() ? 0 : *std::max_element(group_of.begin(), group_of.end()) + 1;
  std::vector<int> live(groups, 0), peak(groups, 0);
  for (const Instr& in : schedule.programs.at(rank)) {
    if (in.stage < 0) continue;
    const int g = group_of[schedule.shape.chunk_of(in.stage)];
    // Activations live from the forward to the last backward pass that reads them.
    if (in.op == Op::Forward) peak[g] = std::max(peak[g], ++live[g]);
    if (in.op == Op::Backward || in.op == Op::BackwardWeight) --live[g];
  }
  return peak;
}

}  // namespace

std::vector<int> peak_in_flight(const Schedule& schedule) {
  check_well_formed(schedule, "peak_in_flight");
  const std::vector<int> one_group(schedule.shape.vp, 0);
  std::vector<int> peaks;
  for (int r = 0; r < schedule.shape.pp; ++r)
    peaks.push_back(group_peaks(schedule, r, one_group)[0]);
  return peaks;
}

std::vector<int> peak_in_flight_per_group(const Schedule& schedule, int rank,
                                          std::span<const int> group_of_chunk) {
  check_well_formed(schedule, "peak_in_flight_per_group");
  return group_peaks(schedule, rank, group_of_chunk);
}

std::vector<std::vector<int>> peak_in_flight_per_group(
    const Schedule& schedule, const std::vector<std::vector<int>>& group_of_chunk) {
  check_well_formed(schedule, "peak_in_flight_per_group");
  WEFT_CHECK(static_cast<int>(group_of_chunk.size()) == schedule.shape.pp, "groups for ",
             group_of_chunk.size(), " ranks, the schedule has ", schedule.shape.pp);
  std::vector<std::vector<int>> peaks;
  for (int r = 0; r < schedule.shape.pp; ++r) {
    peaks.push_back(group_peaks(schedule, r, group_of_chunk[r]));
  }
  return peaks;
}

}  // namespace weft::schedule
