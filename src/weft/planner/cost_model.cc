#include "weft/planner/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "weft/parallel/topology.h"

namespace weft::planner {

double gemm_shape_efficiency(const GemmModel& g, int64_t M, int64_t N, int64_t K, int64_t batch) {
  const int64_t tiles = (M + g.tile_m - 1) / g.tile_m * ((N + g.tile_n - 1) / g.tile_n) * batch;
  const int64_t waves = (tiles + g.compute_units - 1) / g.compute_units;
  const double wave_eff = static_cast<double>(M) * N * batch /
                          (static_cast<double>(waves) * g.compute_units * g.tile_m * g.tile_n);
  const double k_eff = static_cast<double>(K) / (static_cast<double>(K) + g.k_half);
  return wave_eff * k_eff;
}

double gemm_time(const Cluster& c, double peak, int64_t M, int64_t N, int64_t K, int64_t batch) {
  if (M <= 0 || N <= 0 || K <= 0 || batch <= 0) return 0;
  const double flops = 2.0 * M * N * K * batch;
  const double rate = peak * c.gemm.efficiency * gemm_shape_efficiency(c.gemm, M, N, K, batch);
  return c.compute_scale * std::max(c.gemm.min_time, flops / rate);
}

double exposed_reduction(double reduce, double backward, double layers) {
  if (reduce <= 0) return 0;
  return std::max(reduce - backward * (1 - 1 / layers), reduce / layers);
}

double memory_time(const Cluster& c, double bytes) {
  return c.compute_scale * bytes / (c.memory_bandwidth * c.memory_efficiency);
}

double optimizer_time(const Cluster& c, double bytes) {
  if (c.optimizer_bandwidth <= 0) return memory_time(c, bytes);
  return c.compute_scale * bytes / c.optimizer_bandwidth;
}

double weight_pass_time(const Cluster& c, double bytes) {
  // Not times compute_scale: the two are separate terms of the refit (calibration_fit.h), so
  // neither can grow without bound while the other shrinks to keep their product. 0 exactly when
  // unset, even on a preset whose memory bandwidth is unknown (0 * inf is NaN).
  return c.weight_passes > 0 ? c.weight_passes * bytes / (c.memory_bandwidth * c.memory_efficiency)
                             : 0;
}

std::string_view span_name(Span s) {
  constexpr std::array<std::string_view, 4> kNames = {"device", "package", "node", "network"};
  return kNames.at(static_cast<size_t>(s));  // in Span's order
}

namespace {

// The link a set of ranks (one group, or two neighbours) crosses.
GroupLink link_of(const Cluster& cl, const std::vector<int>& ranks, int size) {
  GroupLink g;
  g.size = size;
  if (ranks.size() <= 1) return g;
  std::map<int, int> per_node;
  bool one_package = true;
  for (int r : ranks) {
    ++per_node[r / cl.devices_per_node];
    one_package = one_package && r / cl.devices_per_package == ranks[0] / cl.devices_per_package;
  }
  g.members_per_node = 0;
  for (const auto& [node, n] : per_node) g.members_per_node = std::max(g.members_per_node, n);
  if (per_node.size() > 1) {
    g.span = Span::Network;
    g.link.latency = cl.network.latency;
    g.link.bandwidth = g.members_per_node * cl.network.bandwidth;
    if (cl.node.present()) g.link.bandwidth = std::min(g.link.bandwidth, cl.node.bandwidth);
  } else if (one_package && cl.devices_per_package > 1 && cl.package.present()) {
    g.span = Span::Package;
    g.link = cl.package;
  } else {
    g.span = Span::Node;
    g.link = cl.node.present() ? cl.node : cl.network;
  }
  return g;
}

}  // namespace

Placement place(const Cluster& cl, const layout::Layout& c) {
  const parallel::Topology topo(c.grid());
  Placement p;
  // Groups are regular under Megatron's order, so rank 0's are representative.
  p.tp = link_of(cl, topo.tp_group(0), c.tp);
  p.dp = link_of(cl, topo.dp_group(0), c.dp);
  // Pipeline messages go between neighbours; the slowest hop sets the pace.
  p.pp.size = c.pp;
  const std::vector<int> chain = topo.pp_group(0);
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    GroupLink hop = link_of(cl, {chain[i], chain[i + 1]}, c.pp);
    if (i == 0 || hop.span > p.pp.span) p.pp = hop;
  }
  return p;
}

double collective_time(const GroupLink& g, Collective op, double bytes) {
  const double p = g.size;
  if (g.size <= 1 || bytes <= 0) return 0;
  const double alpha = g.link.latency;
  double beta = 1.0 / g.link.bandwidth;
  const double log_p = std::ceil(std::log2(p));
  switch (op) {
    case Collective::AllReduce: {
      const double ring = 2 * (p - 1) / p * bytes * beta + 2 * (p - 1) * alpha;
      const double tree = 2 * bytes * beta + 2 * log_p * alpha;
      return std::min(ring, tree);
    }
    case Collective::ReduceScatter:
    case Collective::AllGather: {
      const double own = op == Collective::ReduceScatter ? g.link.reduce_scatter_bandwidth
                                                         : g.link.all_gather_bandwidth;
      if (own > 0) beta = 1.0 / own;
      const double ring = (p - 1) / p * bytes * beta + (p - 1) * alpha;
      const double halving = (p - 1) / p * bytes * beta + log_p * alpha;
      return std::min(ring, halving);
    }
  }
  return 0;
}

double p2p_time(const GroupLink& g, double bytes) {
  if (g.size <= 1) return 0;
  return g.link.latency + bytes / g.link.bandwidth;
}

}  // namespace weft::planner
