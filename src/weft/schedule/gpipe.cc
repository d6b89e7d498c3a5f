// GPipe (Huang et al., NeurIPS'19): every rank runs the forwards of all m microbatches, then
// their backwards. Each rank holds all m microbatches' activations at the turn (peak in flight
// m); the bubble is (pp-1)/m of the useful time (Narayanan et al., SC'21, §2.2.1).

#include "weft/schedule/generators.h"

namespace weft::schedule::detail {

std::vector<Program> gpipe_programs(const Shape& shape) {
  const int m = shape.microbatches;
  std::vector<Program> programs(shape.pp);
  for (int rank = 0; rank < shape.pp; ++rank) {
    Program& program = programs[rank];
    for (int mb = 0; mb < m; ++mb) program.push_back(compute(Op::Forward, rank, mb));
    // Backwards in microbatch order: the last rank can start B0 as soon as F(m-1) ends, and
    // rank r's B(k) follows rank r+1's, so the makespan is (m+pp-1)(tf+tb) either way.
    for (int mb = 0; mb < m; ++mb) program.push_back(compute(Op::Backward, rank, mb));
  }
  return programs;
}

}  // namespace weft::schedule::detail
