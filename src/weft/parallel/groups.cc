#include "weft/parallel/groups.h"

#include "weft/core/check.h"

namespace weft::parallel {

ProcessGroups make_groups(comm::Communicator& world, const Topology& topo) {
  WEFT_CHECK(world.size() == topo.world(), "a world of ", world.size(), " ranks for a grid of ",
             topo.world());
  const int r = world.rank();
  const Coord c = topo.coord(r);
  const GridShape& g = topo.shape();
  ProcessGroups out;
  out.tp = world.split(topo.tp_group_id(r), c.tp, "tp");
  out.pp = world.split(topo.pp_group_id(r), c.pp, "pp");
  out.dp = world.split(topo.dp_group_id(r), c.dp, "dp");
  out.model = world.split(c.dp, c.tp + g.tp * c.pp, "model");
  // split() is collective over the world: the middle ranks join a group of their own and drop it.
  const bool end = g.pp > 1 && (c.pp == 0 || c.pp == g.pp - 1);
  auto embedding = world.split(end ? topo.pp_group_id(r) : topo.world() + r, c.pp, "embedding");
  if (end) out.embedding = std::move(embedding);
  return out;
}

}  // namespace weft::parallel
