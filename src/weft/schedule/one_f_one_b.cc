// 1F1B, PipeDream-Flush (Narayanan et al., SC'21, §2.2.1, Figure 4 top): rank r runs
// pp-r-1 warm-up forwards, then alternates one forward and one backward, then drains the
// remaining backwards. Same bubble as GPipe, (pp-1)/m, but rank r holds at most pp-r
// microbatches' activations instead of m.
//
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24, §3.1, Figure 3 top). The
// backward is split into I (gradient w.r.t. the stage's input, on the critical path between
// ranks) and W (gradient w.r.t. its weights, needed only by the optimizer). Rank r keeps
// 1F1B's order of F and I with pp-r-1 warm-up forwards, and defers its W passes by r: W(k)
// runs right after I(k+r), the rest at the end. The deferred W's fill the cool-down bubbles
// of the later ranks, so their I's reach rank 0 sooner; the bubble falls from 1F1B's
// (pp-1)(tF+tI+tW) to (pp-1)(tF+tI-tW), while every rank holds at most
// (pp-r-1) + 1 + r = pp microbatches between F and W: the peak of 1F1B's rank 0.

#include <algorithm>
#include <deque>

#include "weft/schedule/generators.h"

namespace weft::schedule::detail {

std::vector<Program> one_f_one_b_programs(const Shape& shape, bool split_backward) {
  const int pp = shape.pp, m = shape.microbatches;
  std::vector<Program> programs(pp);
  for (int rank = 0; rank < pp; ++rank) {
    Program& program = programs[rank];
    std::deque<int> pending_w;  // ZB-H1: microbatches whose I ran and whose W has not
    auto backward = [&](int mb) {
      if (!split_backward) {
        program.push_back(compute(Op::Backward, rank, mb));
        return;
      }
      program.push_back(compute(Op::BackwardInput, rank, mb));
      pending_w.push_back(mb);
      if (static_cast<int>(pending_w.size()) > rank) {
        program.push_back(compute(Op::BackwardWeight, rank, pending_w.front()));
        pending_w.pop_front();
      }
    };
    const int warmup = std::min(pp - rank - 1, m);
    for (int mb = 0; mb < warmup; ++mb) program.push_back(compute(Op::Forward, rank, mb));
    for (int k = 0; k < m - warmup; ++k) {
      program.push_back(compute(Op::Forward, rank, warmup + k));
      backward(k);
    }
    for (int mb = m - warmup; mb < m; ++mb) backward(mb);
    for (int mb : pending_w) program.push_back(compute(Op::BackwardWeight, rank, mb));
  }
  return programs;
}

}  // namespace weft::schedule::detail
