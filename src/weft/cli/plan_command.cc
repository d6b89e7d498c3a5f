// weft plan: rank the feasible parallel configurations of a training job on a cluster by
// predicted throughput (docs/planner.md), or, with --check, the gate a launcher runs before
// mpirun: does RUN.toml's layout fit in memory, is its schedule deadlock-free, how long is a step;
// with --scaling weak|strong --gpus 128,256,..., a scaling study (planner/scaling.h): per-device
// throughput and scaling efficiency at each size, as a table and an SVG chart.

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "weft/cli/commands.h"
#include "weft/cli/device.h"
#include "weft/cli/job_options.h"
#include "weft/cli/launch_check.h"
#include "weft/config/run_config.h"
#include "weft/core/pending_file.h"
#include "weft/core/status.h"
#include "weft/model/gpt_config.h"
#include "weft/planner/report.h"
#include "weft/planner/scaling.h"
#include "weft/planner/search.h"
#include "weft/planner/stage_costs.h"
#include "weft/plot/plot.h"
#include "weft/schedule/schedule.h"

namespace weft::cli {
namespace {

struct PlanOptions {
  JobOptions job;
  int top = 10, infeasible = 5;
  std::string check;           // RUN.toml
  std::string device = "cpu";  // with --check: the trainer's --device, which sets the precision
  int world = 0;
  std::vector<std::string> overrides;
  std::vector<int> gpus;  // --gpus: one size, or the sizes of a --scaling study
  std::string scaling;    // weak | strong
  std::string config;     // --config for --scaling: the layout held fixed
  std::string svg = "scaling.svg";
};

// One error before any search, instead of every candidate infeasible for the same reason: a
// preset without a peak rate for the job's number format says what to change.
void check_peak(const planner::Cluster& cluster, const planner::Job& job,
                const std::string& cluster_path) {
  using namespace planner;
  if (compute_peak(cluster, job.precision) > 0) return;
  std::string has;
  for (NumberFormat f :
       {NumberFormat::BF16, NumberFormat::FP16, NumberFormat::TF32, NumberFormat::FP32}) {
    if (cluster.peak(f) > 0)
      has += fmt::format("{}{}", has.empty() ? "" : ", ", number_format_name(f));
  }
  const bool fp32 = job.precision == Precision::FP32;
  throw Error(fmt::format(
      "cluster {} ({}) has no peak rate for --precision {}: its [peak_tflops] gives only {}.\n"
      "  Either plan in a precision it has ({}), or add {} = <TFLOP/s per device> to "
      "[peak_tflops] in {}",
      cluster.name, cluster_path, precision_name(job.precision), has,
      cluster.peak(NumberFormat::FP32) > 0 ? "--precision fp32: weft's CPU trainer computes in fp32"
                                           : "--precision bf16-mixed",
      fp32 ? "fp32" : "bf16 (or fp16)", cluster_path));
}

void check_size(const planner::Cluster& cluster, int gpus) {
  if (cluster.max_nodes > 0 && gpus > cluster.max_nodes * cluster.devices_per_node) {
    throw Error(fmt::format("{} has at most {} devices ({} nodes of {}), asked for {}",
                            cluster.name, cluster.max_nodes * cluster.devices_per_node,
                            cluster.max_nodes, cluster.devices_per_node, gpus));
  }
}

void run_scaling(const PlanOptions& o) {
  using namespace planner;
  const ScalingMode mode = parse_scaling_mode(o.scaling).value_or_throw("--scaling");
  const auto [cluster, job] = load_job(o.job, "weft plan --scaling weak|strong --gpus N1,N2,...");
  check_peak(cluster, job, o.job.cluster);
  for (int n : o.gpus) check_size(cluster, n);
  std::optional<layout::Layout> fixed;
  if (!o.config.empty()) {
    fixed = layout::parse(o.config, o.gpus.front())
                .value_or_throw(fmt::format("--config {}", o.config));
  }
  const Options model{.pp_scatter_gather = o.job.scatter_gather};
  const ScalingStudy study = scaling_study(cluster, job, mode, o.gpus, fixed, SearchSpace{}, model);
  fmt::print("{}", format_scaling(study, cluster, job));
  if (o.svg.empty()) return;
  plot::Series efficiency{.label = "scaling efficiency (tokens/s per device)",
                          .color = "#1f77b4",
                          .points = {},
                          .markers = true};
  plot::Series mfu{.label = "MFU", .color = "#d62728", .points = {}, .markers = true};
  plot::Series ideal{.label = "ideal", .color = "#999999", .points = {}};
  for (const ScalingPoint& p : study.points) {
    if (!p.feasible) continue;
    efficiency.points.emplace_back(p.devices, 100 * p.efficiency);
    mfu.points.emplace_back(p.devices, 100 * p.best.mfu);
  }
  if (!efficiency.points.empty()) {
    ideal.points = {{efficiency.points.front().first, 100}, {efficiency.points.back().first, 100}};
  }
  const std::string title = fmt::format("{} scaling: {} on {} ({}), global batch {} at {} devices",
                                        scaling_mode_name(mode), job.model.name, cluster.device,
                                        cluster.name, job.global_batch, o.gpus.front());
  write_file_atomic(o.svg, plot::render_line_chart({efficiency, mfu, ideal}, title, "devices",
                                                   "% (efficiency: of the first size)"))
      .throw_if_error(fmt::format("cannot write the SVG to '{}'", o.svg));
  fmt::print("svg {}\n", o.svg);
}

void run_search(const PlanOptions& o) {
  using namespace planner;
  const auto [cluster, job] = load_job(o.job, "weft plan (or --check RUN.toml --world N)");
  check_peak(cluster, job, o.job.cluster);
  check_size(cluster, o.job.gpus);
  const Options model{.pp_scatter_gather = o.job.scatter_gather};
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
  const config::RunConfig cfg =
      config::load_run_config(o.check, o.overrides).value_or_throw("invalid run config");
  const std::string cluster_path =
      o.job.cluster.empty() ? "configs/clusters/this-machine.toml" : o.job.cluster;
  const Cluster cluster = load_cluster(cluster_path).value_or_throw("invalid cluster preset");
  const Precision precision = device_precision(o.device);  // fp32 on the CPU, else bf16-mixed
  const auto [job, c] = planned_run(cfg, o.world, precision)
                            .value_or_throw(fmt::format(
                                "check failed: {} cannot run on {} processes", o.check, o.world));

  const Simulation sim = simulate_config(cluster, job, c);
  const Prediction& p = sim.prediction;
  fmt::print("{}: {} on {} processes ({}, --device {}: {})\n", o.check, to_string(c), o.world,
             cluster.name, o.device, precision_name(precision));
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
  // --gpus takes a list here: the sizes of a --scaling study (one size otherwise).
  cmd->remove_option(cmd->get_option("--gpus"));
  cmd->add_option("--gpus", o->gpus, "devices to use; with --scaling the sizes: 128,256,512")
      ->delimiter(',');
  cmd->add_option("--scaling", o->scaling,
                  "weak (global batch grows with --gpus) | strong (it stays): a scaling study");
  cmd->add_option(
      "--config", o->config,
      "with --scaling: hold this layout (tp=8,pp=4,...; dp grows) instead of searching");
  cmd->add_option("--svg", o->svg, "with --scaling: the chart to write (empty: none)")
      ->capture_default_str();
  cmd->add_option("--top", o->top, "rows to print")->capture_default_str();
  cmd->add_option("--infeasible", o->infeasible, "infeasible examples to print")
      ->capture_default_str();
  cmd->add_option("--check", o->check,
                  "check RUN.toml's layout before launch: memory, deadlock, step time");
  cmd->add_option("--world", o->world, "processes the run will have (with --check)");
  cmd->add_option("--set", o->overrides, "override a RUN.toml key (with --check)");
  cmd->add_option(
      "--device", o->device,
      std::string("with --check: the device `weft train` will run on (its precision): ") +
          kDeviceHelp);
  cmd->callback([o, cmd] {
    if (!o->gpus.empty()) o->job.gpus = o->gpus.front();
    if (!o->scaling.empty()) {
      run_scaling(*o);
      return;
    }
    if (o->gpus.size() > 1) {
      throw Error("--gpus takes one size without --scaling (a list is for --scaling weak|strong)");
    }
    if (!o->config.empty()) throw Error("--config goes with --scaling (weft simulate prices one)");
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
