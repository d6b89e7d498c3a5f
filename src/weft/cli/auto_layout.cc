#include "weft/cli/auto_layout.h"

#include <fmt/core.h>

#include <algorithm>
#include <optional>

#include "weft/cli/device.h"
#include "weft/cli/launch_check.h"
#include "weft/core/node.h"
#include "weft/layout/layout.h"
#include "weft/planner/auto_layout.h"
#include "weft/planner/stage_costs.h"

namespace weft::cli {
namespace {

struct Choice {
  planner::Prediction best;
  std::string cluster;  // the preset's name
};

// Rank 0's search. `per_process` > 0: the bytes a process of the CPU engine may take (the
// preset's device memory is then the host's share, not a device's).
Choice search_layout(const config::RunConfig& cfg, int world_size, const std::string& device,
                     const std::string& cluster_path, double per_process) {
  using namespace planner;
  const Precision precision = device_precision(device);
  Cluster cluster =
      load_cluster(cluster_path).value_or_throw("parallel.auto: invalid cluster preset");
  if (compute_peak(cluster, precision) <= 0) {
    throw Error(fmt::format(
        "parallel.auto: cluster preset {} has no peak rate for {}, the precision of --device {}: "
        "give `weft train --cluster` a preset of the device (configs/clusters/*.toml)",
        cluster_path, precision_name(precision), device));
  }
  if (per_process > 0) {
    cluster.memory_bytes = std::min(cluster.usable_memory(), per_process);
    cluster.reserved_bytes = 0;
  }
  const Job job = planned_job(cfg, world_size, precision);
  auto best = auto_layout(cluster, job, cfg.parallel);
  best.status().throw_if_error(fmt::format(
      "parallel.auto: no layout of {} runs on {} ranks with train.global_batch={}, "
      "train.seq_len={}, train.micro_batch={} and train.recompute='{}' in {} per rank (cluster "
      "{}); for each process grid, why not:",
      cfg.model.name, world_size, job.global_batch, job.seq_len, cfg.parallel.micro_batch,
      model::recompute_name(cfg.parallel.recompute), format_bytes(cluster.usable_memory()),
      cluster.name));
  return {std::move(best).value(), cluster.name};
}

}  // namespace

void apply_parallel_auto(config::RunConfig& cfg, int world_size, const std::string& device,
                         const std::string& cluster_path, comm::Communicator* world) {
  if (!cfg.auto_layout) return;
  const bool leader = world == nullptr || world->rank() == 0;
  const layout::Layout given = cfg.parallel;
  if (given.grid().world() == world_size) {
    if (leader) {
      fmt::print(stderr,
                 "weft train: parallel.auto: the run config's {} takes the {} ranks: kept\n",
                 layout::short_name(given), world_size);
    }
    return;
  }
  // The CPU engine's state lives in host memory, which the node's processes share.
  const bool host = device == "cpu" || device == "host-bf16";
  const double per_process =
      host ? least_available_memory(world) / local_processes(world_size) : 0.0;
  std::optional<Choice> choice;
  std::string why;
  if (leader) {
    try {
      choice = search_layout(cfg, world_size, device, cluster_path, per_process);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  // Rank 0's verdict for every rank: the layout it chose, as text (layout::parse reads it back
  // whole), or "" when none.
  const std::string chosen =
      comm::all_gather_strings(world, choice ? layout::to_string(choice->best.config) : "")[0];
  if (chosen.empty()) throw Error(leader ? why : "parallel.auto found no layout (rank 0 says why)");
  cfg.parallel = layout::parse(chosen, world_size).value_or_throw("parallel.auto (a bug)");
  const layout::Layout& l = cfg.parallel;
  if (!leader) return;
  const planner::Prediction& p = choice->best;
  fmt::print(stderr,
             "weft train: parallel.auto chose {} for {} ranks: predicted {:.3g} s/step, {} on the "
             "busiest rank (cluster {}); it replaces the run config's tp={} pp={} dp={}, which "
             "takes {} rank{}\n",
             layout::short_name(l), world_size, p.time.total,
             planner::format_bytes(p.memory.total()), choice->cluster, given.tp, given.pp, given.dp,
             given.grid().world(), given.grid().world() == 1 ? "" : "s");
}

}  // namespace weft::cli
