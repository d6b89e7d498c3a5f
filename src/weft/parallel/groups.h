#pragma once
// The communicators of the process grid (DESIGN.md §2, parallel/groups), split from the world by
// the topology's rank order. Every rank of the world calls make_groups() together.

#include <memory>

#include "weft/comm/communicator.h"
#include "weft/parallel/topology.h"

namespace weft::parallel {

struct ProcessGroups {
  std::unique_ptr<comm::Communicator> tp;  // this rank's tensor-parallel group ("tp")
  std::unique_ptr<comm::Communicator> pp;  // its pipeline, ranks in stage order ("pp")
  std::unique_ptr<comm::Communicator> dp;  // its data-parallel replicas ("dp")
  // The ranks of one model replica, tp x pp ("model"): what a gradient norm sums over.
  std::unique_ptr<comm::Communicator> model;
  // The first and last pipeline rank of this rank's pipeline ("embedding"): the two copies of the
  // tied word embedding. Null on the ranks between, and when pp = 1.
  std::unique_ptr<comm::Communicator> embedding;
};

ProcessGroups make_groups(comm::Communicator& world, const Topology& topo);

}  // namespace weft::parallel
