#pragma once
// The configuration search (docs/planner.md §7): enumerate (tp, pp, dp, vp, microbatch size,
// schedule, recomputation, sequence parallelism, ZeRO stage) for a job on a cluster, reject the
// ones that cannot run with every reason (validate(): the trainer's own layout rules for the engine
// of the job's precision, layout/validate.h, so nothing ranked is refused by `weft train`), skip
// the simulation of the ones that do not fit in memory, simulate the rest and rank them by
// predicted throughput.

#include <map>
#include <string>
#include <vector>

#include "weft/planner/simulate.h"

namespace weft::planner {

struct SearchSpace {
  std::vector<int> micro_batches = {1, 2, 4, 8, 16};
  std::vector<int> vps = {2, 3, 4, 6, 8};  // model chunks tried for the interleaved schedule
  std::vector<schedule::Kind> schedules = {schedule::Kind::GPipe, schedule::Kind::OneFOneB,
                                           schedule::Kind::Interleaved,
                                           schedule::Kind::ZeroBubbleH1};
  std::vector<model::Recompute> recomputes = {model::Recompute::None, model::Recompute::Selective,
                                              model::Recompute::Full};
  std::vector<int> zero_stages = {0, 1, 2, 3};
  std::vector<bool> sequence_parallel = {false, true};  // tried where tp > 1
  int max_tp = 64;
  // Empty: every divisor of the world (tp up to max_tp, pp up to n_layer); else only these
  // (divisors of the world among them), e.g. to let the search pick the rest for a given layout.
  std::vector<int> tps, pps;
};

// Every candidate: tp and pp over the divisors of the world (pp at most n_layer; or the space's
// tps and pps), dp the rest, and the cross product of the space's other axes (sequence
// parallelism only with tp > 1, ZeRO only with dp > 1, vp > 1 only for the interleaved schedule,
// one schedule when pp = 1).
std::vector<layout::Layout> enumerate(const Job& job, const SearchSpace& space);

struct SearchResult {
  // The fastest feasible configurations, simulated, fastest first: every one whose lower bound
  // (its busiest rank's work) could place it among the best `keep` (branch and bound, exact for
  // those places).
  std::vector<Prediction> ranked;
  int feasible = 0;                    // candidates that can run and fit in memory
  int simulated = 0;                   // of those, how many the bound did not rule out
  std::vector<Prediction> infeasible;  // with their reasons
  int candidates = 0;
  double seconds = 0;  // wall time of the search
  // Infeasible candidates per reason, the reason's numbers stripped ("needs # GiB per device").
  std::map<std::string, int> reason_counts;
};

// `keep`: how many of the best to rank exactly (and re-simulate with the pp/bubble split).
// `model`: the modelling choices (overlap_dp, pp_scatter_gather); the rest is the search's.
SearchResult search(const Cluster& cluster, const Job& job, const SearchSpace& space = {},
                    int keep = 10, const Options& model = {});

}  // namespace weft::planner
