// weft simulate: one parallel configuration of a training job on a cluster, priced end to end
// (docs/planner.md): the step's breakdown, memory per device, throughput, plus a Chrome trace
// (one track per pipeline rank) and an SVG timeline of the step.

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "weft/cli/commands.h"
#include "weft/cli/job_options.h"
#include "weft/core/pending_file.h"
#include "weft/core/status.h"
#include "weft/model/gpt_config.h"
#include "weft/planner/comm_volume.h"
#include "weft/planner/report.h"
#include "weft/planner/simulate.h"
#include "weft/schedule/svg.h"

namespace weft::cli {
namespace {

struct SimulateOptions {
  JobOptions job;
  std::string config;
  std::string trace = "step.trace.json", svg = "step.svg";
  bool volume = false;
};

void write_output(const std::string& path, const std::string& contents, const std::string& what) {
  write_file_atomic(path, contents)
      .throw_if_error(fmt::format("cannot write the {} to '{}'", what, path));
}

void run_simulate(const SimulateOptions& o) {
  using namespace planner;
  Status missing;
  if (o.config.empty()) {
    missing.add("--config is required (tp=8,pp=8,mb=1,schedule=interleaved,...)");
  }
  const auto [cluster, job] = load_job(o.job, "weft simulate", missing);
  const layout::Layout c =
      layout::parse(o.config, o.job.gpus).value_or_throw(fmt::format("--config {}", o.config));
  validate(c, job).throw_if_error("the configuration cannot run this job");

  const Options options{.pp_scatter_gather = o.job.scatter_gather, .keep_timeline = true};
  const Simulation sim = simulate_config(cluster, job, c, options);
  fmt::print("{}\n\n{}", describe(cluster, job), format_prediction(sim.prediction, cluster, job));
  if (o.volume) {
    fmt::print(
        "\ncommunication of one step (pipeline rank 0; elements in the Recording "
        "convention):\n{}",
        format_volume(step_volume(job, c, 0)));
  }
  const std::string title = fmt::format("{} {} on {}", job.model.name, short_name(c), cluster.name);
  if (!o.trace.empty()) {
    write_output(o.trace, chrome_trace_json(sim.timeline, title), "Chrome trace");
    fmt::print("trace           {}  (chrome://tracing or ui.perfetto.dev)\n", o.trace);
  }
  if (!o.svg.empty()) {
    write_output(o.svg, schedule::render_svg(sim.timeline, title), "SVG");
    fmt::print("svg             {}\n", o.svg);
  }
  // The breakdown above says why; the exit code lets a script tell a layout that cannot run.
  if (!sim.prediction.feasible) {
    fmt::print(stderr, "weft simulate: the configuration is infeasible (see the verdict above)\n");
    throw ExitQuietly{1};
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "simulate", "Predict one configuration's step: breakdown, memory, trace and SVG timeline");
  auto o = std::make_shared<SimulateOptions>();
  add_job_options(cmd, o->job);
  cmd->add_option("--config", o->config,
                  "tp=8,pp=8,dp=16,vp=2,mb=1,schedule=interleaved,recompute=full,sp=1,zero=1 "
                  "(dp defaults to gpus/(tp*pp))");
  cmd->add_option("--trace", o->trace, "write the Chrome trace here (empty: none)")
      ->capture_default_str();
  cmd->add_option("--svg", o->svg, "write the SVG timeline here (empty: none)")
      ->capture_default_str();
  cmd->add_flag("--volume", o->volume, "also print the step's communication volume per group");
  cmd->callback([o] { run_simulate(*o); });
}

}  // namespace weft::cli
