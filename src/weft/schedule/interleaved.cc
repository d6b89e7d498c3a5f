// Interleaved 1F1B (Narayanan et al., SC'21, §2.2.2, Figure 4 bottom), in the order of
// Megatron-LM's forward_backward_pipelining_with_interleaving: rank r holds vp model chunks
// (global stages r, r+pp, ...). Its k-th forward runs chunk (k mod pp*vp) / pp on microbatch
// (k / (pp*vp))*pp + k mod pp, i.e. groups of pp microbatches go through chunk 0, then chunk 1,
// and so on; backwards visit the chunks in reverse. Warm-up is (pp-r-1)*2 + (vp-1)*pp forwards
// (capped at m*vp): the pp-r-1 extra covers the round trip to the last rank and back before the
// first backward of the last chunk can reach rank r. Then one forward, one backward; then drain.
// Bubble (pp-1)/(vp*m), activations up to (pp-r-1)*2 + (vp-1)*pp + 1 (stage, microbatch) pairs.

#include <algorithm>

#include "weft/schedule/generators.h"

namespace weft::schedule::detail {
namespace {

// The (stage, microbatch) of a rank's k-th forward (or backward) in Megatron's order.
Instr nth(Op op, const Shape& shape, int rank, int k) {
  const int pp = shape.pp, vp = shape.vp;
  const int group_pos = k % (pp * vp);
  int chunk = group_pos / pp;
  if (op != Op::Forward) chunk = vp - 1 - chunk;
  const int microbatch = (k / (pp * vp)) * pp + k % pp;
  return compute(op, chunk * pp + rank, microbatch);
}

}  // namespace

std::vector<Program> interleaved_programs(const Shape& shape) {
  const int pp = shape.pp, vp = shape.vp;
  const int total = shape.microbatches * vp;  // forwards (and backwards) per rank
  std::vector<Program> programs(pp);
  for (int rank = 0; rank < pp; ++rank) {
    Program& program = programs[rank];
    const int warmup = std::min((pp - rank - 1) * 2 + (vp - 1) * pp, total);
    for (int k = 0; k < warmup; ++k) program.push_back(nth(Op::Forward, shape, rank, k));
    for (int k = 0; k < total - warmup; ++k) {
      program.push_back(nth(Op::Forward, shape, rank, warmup + k));
      program.push_back(nth(Op::Backward, shape, rank, k));
    }
    for (int k = total - warmup; k < total; ++k) {
      program.push_back(nth(Op::Backward, shape, rank, k));
    }
  }
  return programs;
}

}  // namespace weft::schedule::detail
