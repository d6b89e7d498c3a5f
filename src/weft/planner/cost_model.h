#pragma once
// The time of one kernel or one message on a cluster (docs/planner.md §3): GEMMs by shape, with
// wave quantization; memory-bound kernels at the streaming bandwidth; collectives and
// point-to-point messages with alpha-beta costs on the link the group actually uses, which the
// rank order (Megatron's: tp fastest, then dp, then pp) decides.

#include <cstdint>
#include <string>

#include "weft/planner/config.h"
#include "weft/planner/hardware.h"

namespace weft::planner {

// Seconds for `batch` independent GEMMs [M,K] x [K,N] at peak rate `peak` (FLOP/s) on one
// device: max(min_time, 2MNK*batch / (peak * efficiency * wave_eff * K/(K + k_half))), where
// wave_eff = M*N*batch / (waves * compute_units * tile_m * tile_n) counts the idle tile slots of
// the last wave and of partial tiles (tile and wave quantization).
double gemm_time(const Cluster& c, double peak, int64_t M, int64_t N, int64_t K, int64_t batch = 1);
// The shape's efficiency factor alone (wave_eff * K/(K + k_half)), in (0, 1].
double gemm_shape_efficiency(const GemmModel& g, int64_t M, int64_t N, int64_t K,
                             int64_t batch = 1);

// Seconds to stream `bytes` (read + written) through device memory.
double memory_time(const Cluster& c, double bytes);
// Seconds the optimizer step takes over `bytes` of parameters, gradients and moments (read +
// written): at Cluster::optimizer_bandwidth when the preset measured it, else as memory_time.
double optimizer_time(const Cluster& c, double bytes);
// Seconds a GEMM call spends on its weight-sized operand beyond its FLOPs (hardware.h,
// Cluster::weight_passes): weight_passes passes over `bytes` at the memory bandwidth (not scaled
// by compute_scale); 0 on a preset that does not set it. Charged once per call, so once per
// microbatch per linear layer.
double weight_pass_time(const Cluster& c, double bytes);
// What a backward pass leaves exposed of its gradient reductions (`reduce` s in all), when each
// layer's bucket goes out as soon as the layer's gradients are complete (PyTorch DDP, Li et al.
// 2020; optim/distributed_optimizer.h): they overlap the rest of the pass (`backward` s over
// `layers` layers), and the last layer's bucket (at least) is exposed.
double exposed_reduction(double reduce, double backward, double layers);

// Where a group's members sit and the link their traffic crosses.
enum class Span { Device, Package, Node, Network };
std::string_view span_name(Span s);

struct GroupLink {
  int size = 1;              // members
  Span span = Span::Device;  // the widest boundary the group crosses
  int members_per_node = 1;  // how many members share a node (each brings its own NIC share)
  Link link;                 // effective alpha and per-member bandwidth
};

// The links of the three groups of `c` on cluster `cl` under Megatron's rank order
// (rank = tp_rank + tp*(dp_rank + dp*pp_rank)). A group inside one package uses the package
// link; inside a node the node link; across nodes the network, whose bandwidth for a ring is
// that of the members_per_node NICs the group owns on each node, capped by the node link:
// min(node.bandwidth, members_per_node * network.bandwidth). For pp it is the link between
// neighbouring pipeline ranks (the slowest such hop).
struct Placement {
  GroupLink tp, dp, pp;
};
Placement place(const Cluster& cl, const layout::Layout& c);

enum class Collective { AllReduce, ReduceScatter, AllGather };

// Seconds for a collective over `g` of a tensor of `bytes` in the Recording convention
// (all_reduce: the buffer; all_gather: the gathered output; reduce_scatter: the input). The
// faster of a ring (Patarasuk & Yuan 2009; all-reduce 2(p-1)/p * S * beta + 2(p-1) alpha) and a
// logarithmic algorithm (Thakur et al. 2005: recursive halving/doubling for reduce-scatter and
// all-gather, (p-1)/p * S * beta + log2(p) alpha; a double binary tree for all-reduce,
// 2 S beta + 2 log2(p) alpha). Zero for a group of one.
double collective_time(const GroupLink& g, Collective op, double bytes);
// One message of `bytes` between neighbours: alpha + bytes * beta; zero for a group of one.
double p2p_time(const GroupLink& g, double bytes);

}  // namespace weft::planner
