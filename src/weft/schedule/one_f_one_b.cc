// 1F1B, PipeDream-Flush (Narayanan et al., SC'21, §2.2.1, Figure 4 top): rank r runs
// pp-r-1 warm-up forwards, then alternates one forward and one backward, then drains the
// remaining backwards. Same bubble as GPipe, (pp-1)/m, but rank r holds at most pp-r
// microbatches' activations instead of m.

#include <algorithm>

#include "weft/schedule/generators.h"

namespace weft::schedule::detail {

std::vector<Program> one_f_one_b_programs(const Shape& shape) {
  const int pp = shape.pp, m = shape.microbatches;
  std::vector<Program> programs(pp);
  for (int rank = 0; rank < pp; ++rank) {
    Program& program = programs[rank];
    const int warmup = std::min(pp - rank - 1, m);
    for (int mb = 0; mb < warmup; ++mb) program.push_back(compute(Op::Forward, rank, mb));
    for (int k = 0; k < m - warmup; ++k) {
      program.push_back(compute(Op::Forward, rank, warmup + k));
      program.push_back(compute(Op::Backward, rank, k));
    }
    for (int mb = m - warmup; mb < m; ++mb) program.push_back(compute(Op::Backward, rank, mb));
  }
  return programs;
}

}  // namespace weft::schedule::detail
