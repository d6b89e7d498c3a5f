#pragma once
// Internal: one generator per kind, behind make_schedule(). Each returns the compute-only
// programs for a shape that check_shape() accepted.

#include <vector>

#include "weft/schedule/instr.h"

namespace weft::schedule::detail {

std::vector<Program> gpipe_programs(const Shape& shape);
// 1F1B, or with `split_backward` ZB-H1 (its I and W passes in place of B).
std::vector<Program> one_f_one_b_programs(const Shape& shape, bool split_backward);
std::vector<Program> interleaved_programs(const Shape& shape);

inline Instr compute(Op op, int stage, int microbatch) { return {op, stage, microbatch, -1}; }

}  // namespace weft::schedule::detail
