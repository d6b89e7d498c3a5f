#include "weft/parallel/topology.h"

#include <fmt/format.h>

namespace weft::parallel {

Status validate(const GridShape& shape, int world) {
  Status s;
  if (shape.tp < 1) s.add(fmt::format("tp={} must be >= 1", shape.tp));
  if (shape.pp < 1) s.add(fmt::format("pp={} must be >= 1", shape.pp));
  if (shape.dp < 1) s.add(fmt::format("dp={} must be >= 1", shape.dp));
  if (s.ok() && shape.world() != world) {
    s.add(fmt::format("tp*pp*dp = {}*{}*{} = {} does not equal the world size {}", shape.tp,
                      shape.pp, shape.dp, shape.world(), world));
  }
  return s;
}

Topology::Topology(GridShape shape) : shape_(shape) {
  WEFT_CHECK(shape.tp >= 1 && shape.pp >= 1 && shape.dp >= 1,
             "grid sizes must be >= 1, got tp=", shape.tp, " pp=", shape.pp, " dp=", shape.dp);
}

Coord Topology::coord(int rank) const {
  WEFT_CHECK(rank >= 0 && rank < world(), "rank ", rank, " is outside the world of ", world());
  return Coord{rank % shape_.tp, (rank / shape_.tp) % shape_.dp, rank / (shape_.tp * shape_.dp)};
}

int Topology::rank(Coord c) const {
  WEFT_CHECK(c.tp >= 0 && c.tp < shape_.tp && c.dp >= 0 && c.dp < shape_.dp && c.pp >= 0 &&
                 c.pp < shape_.pp,
             "coordinate tp", c.tp, "-dp", c.dp, "-pp", c.pp, " is outside the grid");
  return c.tp + shape_.tp * (c.dp + shape_.dp * c.pp);
}

// The ranks of r's group along `axis`, of `size` ranks.
std::vector<int> Topology::group_along(int r, int Coord::*axis, int size) const {
  Coord c = coord(r);
  std::vector<int> g;
  for (c.*axis = 0; c.*axis < size; ++(c.*axis)) g.push_back(rank(c));
  return g;
}

std::vector<int> Topology::tp_group(int r) const { return group_along(r, &Coord::tp, shape_.tp); }
std::vector<int> Topology::dp_group(int r) const { return group_along(r, &Coord::dp, shape_.dp); }
std::vector<int> Topology::pp_group(int r) const { return group_along(r, &Coord::pp, shape_.pp); }

int Topology::tp_group_id(int r) const {
  const Coord c = coord(r);
  return c.dp + shape_.dp * c.pp;
}
int Topology::dp_group_id(int r) const {
  const Coord c = coord(r);
  return c.tp + shape_.tp * c.pp;
}
int Topology::pp_group_id(int r) const {
  const Coord c = coord(r);
  return c.tp + shape_.tp * c.dp;
}

std::string Topology::name(int r) const {
  const Coord c = coord(r);
  return fmt::format("tp{}-dp{}-pp{}", c.tp, c.dp, c.pp);
}

}  // namespace weft::parallel
