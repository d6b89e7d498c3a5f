// weft plan: rank the feasible parallel configurations of a training job on a cluster by
// predicted throughput (docs/planner.md), or, with --check, the gate a launcher runs before
// mpirun: does RUN.toml's layout fit in memory, is its schedule deadlock-free, how long is a step.

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "weft/cli/commands.h"
#include "weft/cli/job_options.h"
#include "weft/cli/launch_check.h"
#include "weft/core/status.h"
#include "weft/model/gpt_config.h"
#include "weft/planner/report.h"
#include "weft/planner/search.h"
#include "weft/runtime/run_config.h"
#include "weft/schedule/schedule.h"

namespace weft::cli {
namespace {

struct PlanOptions {
  JobOptions job;
  int top = 10, infeasible = 5;
  std::string check;  // RUN.toml
  int world = 0;
  std::vector<std::string> overrides;
};

void run_search(const PlanOptions& o) {
  using namespace planner;
  const auto [cluster, job] = load_job(o.job, "weft plan (or --check RUN.toml --world N)");
  if (cluster.max_nodes > 0 && o.job.gpus > cluster.max_nodes * cluster.devices_per_node) {
    throw Error(fmt::format("{} has at most {} devices ({} nodes of {}), asked for {}",
                            cluster.name, cluster.max_nodes * cluster.devices_per_node,
                            cluster.max_nodes, cluster.devices_per_node, o.job.gpus));
  }
  Options model;
  model.pp_scatter_gather = o.job.scatter_gather;
  const SearchResult r = search(cluster, job, SearchSpace{}, o.top, model);
  fmt::print("{}\n", describe(cluster, job));
  fmt::print(
      "searched {} configurations in {:.2f} s: {} infeasible, {} feasible, {} of them simulated "
      "(the rest ruled out by a lower bound)\n\n",
      r.candidates, r.seconds, r.infeasible.size(), r.feasible, r.simulated);
  if (r.ranked.empty()) {
    fmt::print("no configuration fits:\n{}", format_infeasible(r, o.infeasible));
    throw Error("no feasible configuration");
  }
  fmt::print("{}\n", format_ranking(r, job, o.top));
  fmt::print(
      "step time (s) = compute + bubble + exposed tp/pp/dp communication + optimizer, on the "
      "busiest pipeline rank;\nmemory (GiB) per device = weights + grads + optimizer state + "
      "activations + buffers; TFLOP/s counts recomputation (PTD-P Eq. 3), MFU does not.\n\n");
  fmt::print("best:\n{}\n", format_prediction(r.ranked.front(), cluster, job));
  if (o.infeasible > 0 && !r.infeasible.empty()) {
    fmt::print("infeasible, by reason:\n{}", format_infeasible(r, o.infeasible));
  }
}

void run_check(const PlanOptions& o) {
  using namespace planner;
  const runtime::RunConfig cfg =
      runtime::load_run_config(o.check, o.overrides).value_or_throw("invalid run config");
  const std::string cluster_path =
      o.job.cluster.empty() ? "configs/clusters/this-machine.toml" : o.job.cluster;
  const Cluster cluster = load_cluster(cluster_path).value_or_throw("invalid cluster preset");
  const auto [job, c] = planned_run(cfg, o.world)
                            .value_or_throw(fmt::format(
                                "check failed: {} cannot run on {} processes", o.check, o.world));

  const Simulation sim = simulate_config(cluster, job, c);
  const Prediction& p = sim.prediction;
  fmt::print("{}: {} on {} processes ({})\n", o.check, to_string(c), o.world, cluster.name);
  const Status deadlock = schedule::validate(sim.schedule);
  const bool fits = p.memory.total() <= cluster.usable_memory();
  fmt::print("fits in memory   {}: {} per process of {} usable\n", fits ? "yes" : "NO",
             format_bytes(p.memory.total()), format_bytes(cluster.usable_memory()));
  fmt::print("deadlock-free    {}\n", deadlock.ok() ? "yes (every invariant holds, simulation ends)"
                                                    : deadlock.message("NO"));
  if (p.time.total > 0) {
    fmt::print("step time        {:.4g} s predicted ({:.4g} tokens/s)\n", p.time.total,
               p.tokens_per_s);
  }
  fmt::print("\n{}", format_prediction(p, cluster, job));
  if (!fits || !deadlock.ok() || !p.feasible) throw Error("check failed");
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "Rank parallel configurations by predicted throughput; --check a run before launch");
  auto o = std::make_shared<PlanOptions>();
  add_job_options(cmd, o->job);
  cmd->add_option("--top", o->top, "rows to print")->capture_default_str();
  cmd->add_option("--infeasible", o->infeasible, "infeasible examples to print")
      ->capture_default_str();
  cmd->add_option("--check", o->check,
                  "check RUN.toml's layout before launch: memory, deadlock, step time");
  cmd->add_option("--world", o->world, "processes the run will have (with --check)");
  cmd->add_option("--set", o->overrides, "override a RUN.toml key (with --check)");
  cmd->callback([o, cmd] {
    if (!o->check.empty()) {
      if (o->world <= 0) throw Error("--check needs --world N (the processes mpirun will start)");
      PlanOptions c = *o;
      if (cmd->get_option("--cluster")->count() == 0) c.job.cluster.clear();
      run_check(c);
    } else {
      run_search(*o);
    }
  });
}

}  // namespace weft::cli
