#pragma once
// The process grid of PTD-P: pure rank <-> (tp, dp, pp) arithmetic in Megatron's order (tp
// fastest, then dp, then pp; DESIGN.md §3):  rank = tp_rank + tp * (dp_rank + dp * pp_rank).
// Tensor-parallel groups are therefore consecutive ranks (one node's GPUs), and pipeline stages
// the farthest apart (across nodes), which is what the PTD-P paper's placement asks for.

#include <string>
#include <vector>

#include "weft/core/status.h"

namespace weft::parallel {

struct GridShape {
  int tp = 1, pp = 1, dp = 1;
  int world() const { return tp * pp * dp; }
};

struct Coord {
  int tp = 0, dp = 0, pp = 0;
  bool operator==(const Coord&) const = default;
};

// Every problem at once: sizes must be >= 1 and multiply to `world`.
Status validate(const GridShape& shape, int world);

class Topology {
 public:
  explicit Topology(GridShape shape);  // throws weft::Error when a size is < 1

  const GridShape& shape() const { return shape_; }
  int world() const { return shape_.world(); }
  Coord coord(int rank) const;
  int rank(Coord c) const;

  // The ranks of `rank`'s group along one axis, in axis order (the group's own rank numbering).
  std::vector<int> tp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  // A group's index among all groups of that axis (a split() color): groups of one axis are
  // numbered 0.. in the order of their smallest rank.
  int tp_group_id(int rank) const;
  int dp_group_id(int rank) const;
  int pp_group_id(int rank) const;

  // "tp1-dp0-pp2": how a process is named in logs and file names.
  std::string name(int rank) const;

 private:
  std::vector<int> group_along(int rank, int Coord::*axis, int size) const;
  GridShape shape_;
};

}  // namespace weft::parallel
