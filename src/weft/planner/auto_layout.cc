#include "weft/planner/auto_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <tuple>

namespace weft::planner {

SearchSpace auto_layout_space(const layout::Layout& run) {
  SearchSpace space;
  space.micro_batches = {run.micro_batch};
  space.recomputes = {run.recompute};
  return space;
}

Result<Prediction> auto_layout(const Cluster& cluster, const Job& job, const layout::Layout& run) {
  if (Status s = validate(job); !s.ok()) return s;
  // keep = 1: the branch and bound simulates only what could be the fastest.
  const SearchResult r = search(cluster, job, auto_layout_space(run), /*keep=*/1);
  if (!r.ranked.empty()) return r.ranked.front();
  // Per grid, the candidate closest to running: its reasons are the grid's, not a schedule's or
  // a ZeRO stage's that another candidate of the grid avoids.
  std::map<std::tuple<int, int, int>, const Prediction*> closest;
  for (const Prediction& p : r.infeasible) {
    const Prediction*& c = closest[{p.config.tp, p.config.pp, p.config.dp}];
    if (c == nullptr || p.reasons.size() < c->reasons.size() ||
        (p.reasons.size() == c->reasons.size() && p.memory.total() < c->memory.total())) {
      c = &p;
    }
  }
  Status s;
  for (const auto& [grid, p] : closest) {
    const auto& [tp, pp, dp] = grid;
    s.add(fmt::format("tp={} pp={} dp={}: {}", tp, pp, dp, fmt::join(p->reasons, "; ")));
  }
  s.add(fmt::format(
      "start another number of ranks, or change train.global_batch or train.micro_batch (pp "
      "above model.n_layer={} is not tried)",
      job.model.n_layer));
  return s;
}

}  // namespace weft::planner
