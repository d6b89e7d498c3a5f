// weft tune RUN.toml: the planner's ranking of every layout of the run's model on this job's
// processes prunes them to a handful; short real trials of that handful, by successive halving
// (planner/tune.h), pick the winner; the measurements refit the planner's calibration
// (planner/calibration_fit.h). docs/planner.md, "weft tune".
//
//   mpirun -n 4 weft tune configs/runs/demo.toml --budget-minutes 4 --write tuned.toml
//   mpirun -n 8 weft tune RUN.toml --device cuda --cluster configs/clusters/h200.toml
//
// Every rank runs every trial: the layout's process groups over the world, the engine `weft train
// --device` builds for the run with the layout's keys (runtime::make_engine: the CPU in fp32, or a
// device in bf16 mixed precision), the run's data through data::Sampler as `weft train` reads it,
// warm-up and timed steps of the shared step loop (runtime::StepLoop), then everything torn down.
// The planner prices the layouts in the trainer's precision. The search's decisions are the same on
// every rank because everything they read is reduced (step times, memory, failures) or broadcast
// (the clock).

#include <fmt/core.h>
#include <fmt/format.h>
#include <malloc.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "weft/cli/commands.h"
#include "weft/cli/device.h"
#include "weft/cli/job_world.h"
#include "weft/cli/launch_check.h"
#include "weft/cli/tune_figures.h"
#include "weft/cli/tune_speed_probe.h"
#include "weft/cli/validators.h"
#include "weft/config/run_config.h"
#include "weft/core/clock.h"
#include "weft/core/memory_usage.h"
#include "weft/core/node.h"
#include "weft/core/pending_file.h"
#include "weft/core/stop_signals.h"
#include "weft/core/text_file.h"
#include "weft/data/sampler.h"
#include "weft/data/token_dataset.h"
#include "weft/kernels/kernels.h"
#include "weft/parallel/groups.h"
#include "weft/planner/calibration_fit.h"
#include "weft/planner/memory_model.h"
#include "weft/planner/search.h"
#include "weft/planner/tune.h"
#include "weft/runtime/engine.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/runtime/step_loop.h"
#include "weft/schedule/schedule.h"

namespace weft::cli {
namespace {

struct TuneOptions {
  std::string run;
  std::vector<std::string> overrides;
  std::string cluster = "configs/clusters/this-machine.toml";
  double budget_minutes = 0;  // 0 (and no --budget-trials): kDefaultBudgetMinutes
  int budget_trials = 0;
  int top = 16;  // R, the first round's candidates
  int warmup = 2, steps = 3;
  std::string out;    // "": <run.out_dir>/tune
  std::string write;  // a whole run config with the winner's keys
  bool grid = false;
  int passes = 1;  // the grid's passes over its layouts (HalvingOptions::passes)
  std::string calibrate_out;
  bool update_calibration = false;
  std::vector<std::string> refit_from;  // earlier tune.json files of the same job
  std::string device = "cpu";           // where the trials run: the trainer's --device
};

// Four minutes of trials: with the search and the refit a default `weft tune` of a small model
// ends within five (issue 16).
constexpr double kDefaultBudgetMinutes = 4;

double mib(double bytes) { return bytes / (1 << 20); }
std::vector<double> milliseconds(std::vector<double> seconds) {
  for (double& s : seconds) s *= 1e3;
  return seconds;
}
double error_pct(double predicted, double measured) {
  return measured > 0 ? 100.0 * (predicted / measured - 1) : 0.0;
}

// The first non-empty message of the ranks, "rank r: ...", on every rank.
std::string agree_message(comm::Communicator* world, const std::string& mine) {
  const std::vector<std::string> all = comm::all_gather_strings(world, mine);
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty()) return fmt::format("rank {}: {}", r, all[r]);
  }
  return "";
}

bool any_rank(comm::Communicator* world, bool mine) {
  int32_t v = mine ? 1 : 0;
  if (world != nullptr && world->size() > 1) world->all_reduce(&v, 1, comm::ReduceOp::Max);
  return v != 0;
}

// A trial's engine on this rank: the one `weft train --device` builds (runtime::make_engine) for
// the run config with the layout `c`, on the run's device (a backend whose arena is sized for the
// layout, as the trainer sizes it; null on the CPU). Destroyed with the trial: nothing of it
// remains.
struct TrialEngine {
  config::RunConfig cfg;
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<runtime::Engine> engine;  // declared after its backend: destroyed first
};
TrialEngine make_trial_engine(const config::RunConfig& run, const std::string& device,
                              const layout::Layout& c, const parallel::ProcessGroups& groups,
                              comm::Communicator* world) {
  TrialEngine t;
  t.cfg = run;
  t.cfg.parallel = c;
  runtime::EngineDevice on;
  t.backend = make_device(device, t.cfg, world);
  if (t.backend) on = {.backend = t.backend.get(), .group = device_group_maker(device, *t.backend)};
  t.engine = runtime::make_engine(t.cfg, groups, world, on).value_or_throw("the layout's engine");
  t.engine->runner().init(static_cast<uint64_t>(t.cfg.train.seed));
  return t;
}

// One trial of `c` on every rank of `world`: warm-up and timed steps of the shared step loop
// (runtime::StepLoop) on the run's data, the ranks starting each step together. Memory: on the
// CPU the process's peak resident memory above `baseline` (see run_tune), on a device what the
// engine took from the backend, which the memory model predicts to the byte.
planner::TrialResult run_trial(const config::RunConfig& cfg, const std::string& device,
                               const data::TokenDataset& dataset, comm::Communicator* world,
                               const layout::Layout& c, int warmup, int steps, int64_t baseline,
                               const StopSignalListener& signals) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rank = world ? world->rank() : 0;
  planner::TrialResult r;
  r.steps = steps;
  std::vector<double> times;
  int64_t peak = 0;
  {
    // Built and destroyed inside this scope: nothing of one trial outlives it.
    parallel::ProcessGroups groups;
    std::optional<TrialEngine> trial;  // after `groups`: destroyed before them
    std::unique_ptr<data::Sampler> sampler;
    std::unique_ptr<runtime::StepLoop> loop;
    if (world) world->barrier();
    // The last trial's freed memory back to the system, so that it does not count in this one's
    // peak; the peak then restarts from what is resident now.
    malloc_trim(0);
    reset_peak_resident();
    try {
      const parallel::Topology topo(c.grid());
      if (world && world->size() > 1) groups = parallel::make_groups(*world, topo);
      trial.emplace(make_trial_engine(cfg, device, c, groups, world));
      sampler = std::make_unique<data::Sampler>(
          data::Sampler::create(dataset, trial->cfg.sampler(topo.coord(rank).dp))
              .value_or_throw("the run's data"));
      loop = std::make_unique<runtime::StepLoop>(*trial->engine, trial->cfg,
                                                 runtime::batches_of(*sampler), world);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    r.error = agree_message(world, r.error);
    for (int k = 0; r.error.empty() && k < warmup + steps; ++k) {
      if (any_rank(world, signals.heard())) {
        r.stopped = true;
        break;
      }
      std::string mine;
      double dt = 0;
      try {
        dt = loop->step(cfg.train.lr, cfg.train.clip).step_seconds;
      } catch (const std::exception& e) {
        mine = e.what();
      }
      r.error = agree_message(world, mine);
      times.push_back(dt);
    }
    if (trial) {
      peak = trial->backend ? trial->backend->allocated_bytes() : peak_resident_bytes() - baseline;
    }
  }  // torn down
  malloc_trim(0);
  r.ok = r.error.empty();
  if (r.ok && !r.stopped) {
    // The slowest rank's time is the step's; the median timed step is the trial's (TrialResult).
    if (world)
      world->all_reduce(times.data(), static_cast<int64_t>(times.size()), comm::ReduceOp::Max);
    r.step_series_seconds = times;
    times.erase(times.begin(), times.begin() + warmup);
    std::sort(times.begin(), times.end());
    r.step_seconds = times[times.size() / 2];
    r.fastest_seconds = times.front();
    r.peak_bytes = r.rank0_bytes = static_cast<double>(peak);
    if (world) {
      world->all_reduce(&r.peak_bytes, 1, comm::ReduceOp::Max);
      world->broadcast(&r.rank0_bytes, 1, 0);
    }
  }
  r.wall_seconds = seconds_since(t0);
  if (world) world->broadcast(&r.wall_seconds, 1, 0);
  return r;
}

std::string markdown_table(const planner::TuneOutcome& o) {
  std::string s =
      "| planner rank | layout | trials | timed steps | predicted ms | measured ms | error | "
      "memory predicted MiB | measured MiB | error | rank 0 predicted MiB | measured MiB | "
      "error | |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(o.records.size()); ++i) {
    if (!o.records[i].trials.empty()) order.push_back(i);
  }
  // The bracket: the layouts that reached the latest round first, each round's by their figure
  // (the median of their timed steps), then the failed and stopped ones. A layout out in round 1
  // can show a faster figure than the winner's: it had one trial of 3 steps against the winner's
  // 4, and the rounds compare layouts that ran as many trials.
  // Each figure pools and sorts the layout's steps: taken once, not per comparison.
  std::vector<double> figures;
  for (const planner::CandidateRecord& r : o.records) figures.push_back(r.figure());
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const double fa = figures[a], fb = figures[b];
    if (fa <= 0 || fb <= 0) return fa > 0;
    if (o.records[a].last_round != o.records[b].last_round) {
      return o.records[a].last_round > o.records[b].last_round;
    }
    return fa < fb;
  });
  for (int i : order) {
    const planner::CandidateRecord& r = o.records[i];
    const planner::TuneCandidate& c = r.candidate;
    const double figure = figures[i];
    const std::string name = layout::short_name(c.config);
    if (figure <= 0) {
      const std::string why = r.failed ? "failed: " + r.trials.back().error : "stopped";
      s += fmt::format("| {} | {} | {} | | {:.3f} | | | {:.1f} | | | {:.1f} | | | {} |\n",
                       c.predicted_rank, name, r.trials.size(), c.predicted_seconds * 1e3,
                       mib(c.predicted_bytes), mib(c.predicted_rank0_bytes), why);
      continue;
    }
    const planner::CandidateRecord::Memory mem = r.least_memory();
    s += fmt::format(
        "| {} | {} | {} | {} | {:.3f} | {:.3f} | {:+.0f}% | {:.1f} | {:.1f} | {:+.0f}% | {:.1f} | "
        "{:.1f} | {:+.0f}% | {} |\n",
        c.predicted_rank, name, r.trials.size(), r.timed_steps(), c.predicted_seconds * 1e3,
        figure * 1e3, error_pct(c.predicted_seconds, figure), mib(c.predicted_bytes),
        mib(mem.peak_bytes), error_pct(c.predicted_bytes, mem.peak_bytes),
        mib(c.predicted_rank0_bytes), mib(mem.rank0_bytes),
        error_pct(c.predicted_rank0_bytes, mem.rank0_bytes),
        o.winner == i ? "**winner**" : (r.failed ? "failed" : ""));
  }
  return s;
}

std::string keys_text(const layout::Layout& c) {
  std::string s;
  for (const auto& [section, kv] : planner::run_config_keys_of(c)) {
    s += fmt::format("[{}]\n", section);
    for (const auto& [k, v] : kv) s += fmt::format("{} = {}\n", k, v);
  }
  return s;
}

// Writes `fitted` to `target` under the header of the preset it was refitted from (what `weft
// calibrate` measured, and how, stays on top), its last line `refitted`.
void write_refitted_preset(const std::string& target, const std::string& base,
                           const planner::Cluster& fitted, const std::string& refitted) {
  std::string header;
  std::istringstream old(read_text_file(base).value_or(""));
  for (std::string line; std::getline(old, line) && line.starts_with('#');) {
    if (!line.starts_with("# refitted by weft tune")) header += line + "\n";
  }
  write_file_atomic(target, planner::to_toml(fitted, header + refitted))
      .throw_if_error("cannot write the refitted preset");
  fmt::print("wrote the refitted preset {}\n", target);
}

// One `weft tune`: what its parts share (the run, where its trials run, the cluster preset and how
// this machine's speed compares with it, the job, the search), and the parts in order.
class Tune {
 public:
  Tune(const TuneOptions& o, comm::Communicator* world, const StopSignalListener& signals);
  void run();

 private:
  using TuneCandidate = planner::TuneCandidate;
  using TuneOutcome = planner::TuneOutcome;
  void say(const std::string& s) const {
    if (leader) fmt::print("{}", s);
  }
  void check_machine();
  std::vector<TuneCandidate> rank_layouts();
  planner::HalvingOptions halving_options(const std::vector<TuneCandidate>& ranked);
  TuneOutcome run_trials(const std::vector<TuneCandidate>& ranked,
                         const planner::HalvingOptions& h);
  nlohmann::json refit_from_trials(const TuneOutcome& out) const;
  void write_files(const planner::HalvingOptions& h, const TuneOutcome& out,
                   const std::string& table, const nlohmann::json& refit) const;
  void report_winner(const TuneOutcome& out) const;

  const TuneOptions& o;
  comm::Communicator* world;
  const StopSignalListener& signals;
  int world_size = 1;
  bool leader = true;
  config::RunConfig cfg;
  // The trials run where `weft train --device` would: the CPU trainer in fp32, or a device's in
  // bf16 mixed precision, which the planner then prices.
  Precision precision;
  bool host;
  SpeedProbe speed;
  int64_t baseline = 0;  // resident memory before anything of the run (run_trial)
  planner::Cluster cluster;
  int threads = 1;
  double relative = 1;   // the first probes' fastest speed over the preset's GEMM speed
  bool foreign = false;  // the preset describes another machine, by that speed
  planner::Job job;
  std::vector<planner::TrialMeasurement> pooled;  // --refit-from's figures
  double pooled_speed = 0;
  planner::SearchResult sr;
  int r0 = 0;          // the first round's candidates
  double seconds = 0;  // the trials' wall time
};

Tune::Tune(const TuneOptions& options, comm::Communicator* w, const StopSignalListener& s)
    : o(options),
      world(w),
      signals(s),
      world_size(w ? w->size() : 1),
      leader(!w || w->rank() == 0),
      cfg(config::load_run_config(o.run, o.overrides).value_or_throw("invalid run config")),
      precision(device_precision(o.device)),
      host(o.device == "cpu"),
      speed(cfg.model, cfg.parallel.micro_batch, cfg.train.seq_len) {
  using namespace planner;
  // Memory is measured as `weft bench step` and `weft train` see it in a fresh process: the peak
  // above what the process held before anything of the run (MPI is up, no dataset, no model).
  // A baseline taken before each trial instead would leave out what the first trial leaves
  // resident for the rest (the kernels' threads and their packing buffers, MPI's lazily made
  // buffers, the dataset's pages): tiny's first trial measured 8.2 MiB, the next ones 0.8.
  baseline = current_resident_bytes();
  cluster = load_cluster(o.cluster).value_or_throw("invalid cluster preset");
  if (compute_peak(cluster, precision) <= 0) {
    throw Error(
        host ? fmt::format("{} has no peak rate for fp32, the precision of weft's CPU trainer: add "
                           "fp32 = ... to its [peak_tflops], or measure this machine with `weft "
                           "calibrate -o {}`",
                           o.cluster, o.cluster)
             : fmt::format("{} has no peak rate for bf16-mixed, the precision of --device {}: "
                           "give --cluster a preset of the device (configs/clusters/h200.toml, "
                           "...), or add bf16 = ... to its [peak_tflops]",
                           o.cluster, o.device));
  }
  // A device the process cannot reach (no GPU visible, a weft built without CUDA) is one error
  // now, not the same failure once per trial: the backend is made and dropped, as a trial would.
  if (!host) make_device(o.device, 1 << 20);
  threads =
      cfg.train.threads > 0 ? cfg.train.threads : threads_per_process(local_processes(world_size));
  kernels::set_num_threads(threads);
  check_machine();
  job = planned_job(cfg, world_size, precision);
  job.checkpoint_snapshot = false;  // the trials save no checkpoints
  validate(job).throw_if_error("invalid job");
  // Earlier tunes' figures for the refit, read before any trial: a wrong file fails now.
  for (const std::string& path : o.refit_from) {
    const TuneFigures more = read_tune_figures(path, job, threads);
    pooled.insert(pooled.end(), more.layouts.begin(), more.layouts.end());
    pooled_speed = std::max(pooled_speed, more.gemm_speed);
  }
}

// Is the preset this machine's? Three probes now, then one before each trial. (The probe times
// the host's GEMMs: not a device's.)
void Tune::check_machine() {
  using planner::kForeignPresetSpeed;
  for (int i = 0; host && i < 3; ++i) speed.probe(world, cluster);
  const double reference = cluster.gemm_speed > 0 ? cluster.gemm_speed : 1.0;
  relative = speed.fastest() / reference;
  if (!host) return;  // nothing probed: relative 0, not foreign
  say(fmt::format(
      "GEMM speed {:.3f}x the preset's GEMM model ({:.3f}x the speed its factors were fitted "
      "at{})\n",
      speed.fastest(), relative, cluster.gemm_speed > 0 ? "" : ": it does not say, taken as 1"));
  foreign = relative < 1 / kForeignPresetSpeed || relative > kForeignPresetSpeed;
  if (foreign) {
    say(fmt::format(
        "warning: this machine runs the run's GEMMs at {:.2f}x the speed {} was calibrated and "
        "refitted at: it may describe another machine, and its predictions will be off by about "
        "as much; `weft calibrate -o {}` measures this one (then a tune with "
        "--update-calibration refits it)\n",
        relative, o.cluster, o.cluster));
  }
}

// 1. Every layout, priced; all of the feasible ones ranked (keep = every candidate).
std::vector<planner::TuneCandidate> Tune::rank_layouts() {
  using namespace planner;
  sr = search(cluster, job, SearchSpace{}, 1 << 20);
  say(
      fmt::format("weft tune: {} on {} process(es), global batch {} x {} tokens, {} ({})\n"
                  "{} layouts: {} infeasible, {} feasible\n",
                  cfg.model.name, world_size, job.global_batch, job.seq_len, cluster.name,
                  o.cluster, sr.candidates, sr.infeasible.size(), sr.feasible));
  std::string reasons;
  for (const auto& [why, n] : sr.reason_counts) reasons += fmt::format("  {:5} x {}\n", n, why);
  say(reasons);
  if (sr.ranked.empty()) {
    throw Error(fmt::format(
        "no layout of {} can run on {} process(es) with global batch {}:\n{}change the number of "
        "processes (mpirun -n), train.global_batch or train.seq_len",
        cfg.model.name, world_size, job.global_batch, reasons));
  }
  std::vector<TuneCandidate> ranked;
  for (const Prediction& p : sr.ranked) {
    ranked.push_back(
        {.config = p.config,
         .predicted_seconds = p.time.total,
         .predicted_bytes = p.memory.total(),
         .predicted_rank0_bytes = static_cast<double>(
             weft_rank_memory(job, p.config, 0, threads, cluster.runtime_bytes).total()),
         .predicted_rank = static_cast<int>(ranked.size()) + 1});
  }
  return ranked;
}

// 2. The budget, checked before any trial.
planner::HalvingOptions Tune::halving_options(const std::vector<TuneCandidate>& ranked) {
  using namespace planner;
  const bool no_budget = o.budget_trials == 0 && o.budget_minutes == 0;
  const HalvingOptions h{.initial = o.top,
                         .warmup = o.warmup,
                         .first_steps = o.steps,
                         .max_trials = o.budget_trials,
                         .max_seconds = (no_budget ? kDefaultBudgetMinutes : o.budget_minutes) * 60,
                         .grid = o.grid,
                         .passes = o.passes};
  const double first_trial = (h.warmup + h.first_steps) * ranked.front().predicted_seconds;
  if (h.max_seconds > 0 && h.max_seconds < first_trial) {
    throw Error(fmt::format(
        "a budget of {:.3g} minutes is too small for one trial: the best-predicted layout's "
        "{} + {} steps take {:.3g} s predicted; give --budget-minutes {:.2g} or more, or "
        "--budget-trials K",
        h.max_seconds / 60, h.warmup, h.first_steps, first_trial, first_trial / 60 * 1.5));
  }
  r0 = initial_candidates(static_cast<int>(ranked.size()), h);
  say(fmt::format("{}: the {} best-predicted layouts, {} warm-up + {} timed steps{}; budget {}\n\n",
                  o.grid ? "grid" : "successive halving", r0, h.warmup,
                  o.grid ? final_round_steps(r0, h.first_steps) : h.first_steps,
                  o.grid ? (o.passes > 1 ? fmt::format(" each, {} passes", o.passes) : " each")
                         : std::string(" first, doubled each round"),
                  h.max_trials > 0 ? fmt::format("{} trials", h.max_trials)
                                   : fmt::format("{:.3g} minutes", h.max_seconds / 60)));
  return h;
}

// The trials, by successive halving (or the grid) within the budget, on the run's data: checked
// first as `weft train` checks it against the model, since an id beyond the vocabulary would be a
// wrong answer, not a slow one. (The tokenizer's identity is not compared, nor the validation
// split's size: the trials neither generate nor evaluate.)
planner::TuneOutcome Tune::run_trials(const std::vector<TuneCandidate>& ranked,
                                      const planner::HalvingOptions& h) {
  using namespace planner;
  auto dataset = data::open_token_dataset(cfg.data.train).value_or_throw("the run's data");
  config::RunConfig checked = cfg;
  checked.train.eval_every = 0;
  Status data_ok = config::validate_data(checked, *dataset, "", 0);
  data_ok.merge(check_dataset_ids(cfg, *dataset, world));
  data_ok.throw_if_error(fmt::format("invalid run ({})", o.run));
  const auto start = std::chrono::steady_clock::now();
  const ElapsedClock elapsed = [&] {
    double s = seconds_since(start);
    if (world) world->broadcast(&s, 1, 0);  // rank 0's clock decides for everyone
    return s;
  };
  int trial_no = 0;
  const TrialRunner trial = [&](const TuneCandidate& c, int warmup, int steps) {
    const double speed_now = host ? speed.probe(world, cluster) : 0.0;
    TrialResult r =
        run_trial(cfg, o.device, *dataset, world, c.config, warmup, steps, baseline, signals);
    r.gemm_speed = speed_now;
    ++trial_no;
    if (r.stopped) {
      say(fmt::format("  trial {:3}  {:<40} stopped\n", trial_no, short_name(c.config)));
    } else if (!r.ok) {
      say(fmt::format("  trial {:3}  {:<40} FAILED: {}\n", trial_no, short_name(c.config),
                      r.error));
    } else {
      say(fmt::format(
          "  trial {:3}  {:<40} {:3} steps  {:9.3f} ms (fastest {:.3f}, predicted {:.3f})  {:.1f} "
          "MiB\n",
          trial_no, short_name(c.config), steps, r.step_seconds * 1e3, r.fastest_seconds * 1e3,
          c.predicted_seconds * 1e3, mib(r.peak_bytes)));
    }
    return r;
  };
  const TuneOutcome out = successive_halving(ranked, h, trial, elapsed,
                                             [&] { return any_rank(world, signals.heard()); });
  seconds = elapsed();
  return out;
}

// 4. The refit, from each layout's figure (the median of its timed steps): its record for
// tune.json (null when nothing was measured), and the refitted preset where the options ask.
nlohmann::json Tune::refit_from_trials(const TuneOutcome& out) const {
  using namespace planner;
  std::vector<TrialMeasurement> measured;
  nlohmann::json measured_layouts = nlohmann::json::array();  // the refit's errors, in order
  for (const CandidateRecord& r : out.records) {
    if (const double figure = r.figure(); figure > 0) {
      measured.push_back(
          {job, r.candidate.config, figure, r.least_memory().peak_bytes, r.timed_steps()});
      measured_layouts.push_back(to_string(r.candidate.config));
    }
  }
  nlohmann::json refit = nullptr;
  // Processes sharing cores time each other's work, not their own: refused on the CPU. A device's
  // trials are timed on the device.
  const std::string refusal =
      host ? refit_refusal(local_processes(world_size), threads, node_cores()) : "";
  if (measured.empty()) return refit;
  try {
    // Weighted by each trial's timed steps, as the refit weighs them: a 3-step first-round
    // trial is a noisier measurement than a 24-step final one.
    const auto mean_abs = [&](const std::vector<double>& v) {
      double s = 0, w = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        s += measured[i].timed_steps * std::abs(v[i]);
        w += measured[i].timed_steps;
      }
      return w > 0 ? s / w : 0.0;
    };
    const std::vector<double> before = step_time_errors(cluster, measured);
    // This tune's own layouts first; the pooled ones join the refit only.
    const size_t own = measured.size();
    std::vector<TrialMeasurement> all = measured;
    all.insert(all.end(), pooled.begin(), pooled.end());
    refit = {{"layouts", measured_layouts},
             {"pooled_layouts", pooled.size()},
             {"pooled_from", o.refit_from},
             {"errors_before", before},
             {"mean_abs_error_before", mean_abs(before)}};
    if (!refusal.empty()) {
      refit["refused"] = refusal;
      say(fmt::format(
          "refit refused: {}{}\n", refusal,
          o.update_calibration || !o.calibrate_out.empty() ? "; no preset written" : ""));
    } else {
      // The factors hold at the speed the trials ran at, the fastest probe's.
      Cluster base = cluster;
      base.gemm_speed = std::max(speed.fastest(), pooled_speed);
      const Cluster fitted = refit_cluster(base, all);
      const std::vector<double> after = step_time_errors(fitted, measured);
      refit.update({{"errors_after", after},
                    {"mean_abs_error_after", mean_abs(after)},
                    {"compute_scale", fitted.compute_scale},
                    {"weight_passes", fitted.weight_passes},
                    {"step_overhead_ms", fitted.step_overhead * 1e3},
                    {"tp_collective_overhead_us", fitted.tp_collective_overhead * 1e6},
                    {"note", fitted.calibration_note}});
      say(fmt::format(
          "refit{}: the planner's step time error on these {} layouts, mean |predicted/measured "
          "- 1| weighted by timed steps: {:.1f}% before, {:.1f}% after\n  {}\n",
          pooled.empty() ? ""
                         : fmt::format(" with {} layouts' figures from {} earlier tune(s)",
                                       pooled.size(), o.refit_from.size()),
          own, 100 * mean_abs(before), 100 * mean_abs(after), fitted.calibration_note));
      std::string target = o.calibrate_out;
      if (target.empty() && o.update_calibration) target = o.cluster;
      if (!target.empty() && leader) {
        write_refitted_preset(
            target, o.cluster, fitted,
            fmt::format("refitted by weft tune {} on {} measured layouts{}", o.run, all.size(),
                        pooled.empty() ? ""
                                       : fmt::format(" ({} from {})", pooled.size(),
                                                     fmt::join(o.refit_from, ", "))));
      } else if (target.empty()) {
        say("  (--calibrate-out PATH writes the refitted preset; --update-calibration rewrites " +
            o.cluster + ")\n");
      }
    }
  } catch (const Error& e) {
    say(fmt::format("refit skipped: {}\n", e.what()));
  }
  return refit;
}

// Each tried layout's trials and figures, as tune.json lists them.
nlohmann::json layouts_json(const planner::TuneOutcome& out) {
  using namespace planner;
  nlohmann::json layouts = nlohmann::json::array();
  for (const CandidateRecord& r : out.records) {
    if (r.trials.empty()) continue;
    nlohmann::json trials = nlohmann::json::array();
    for (const TrialResult& t : r.trials) {
      trials.push_back({{"ok", t.ok},
                        {"stopped", t.stopped},
                        {"error", t.error},
                        {"steps", t.steps},
                        {"step_ms", t.step_seconds * 1e3},
                        {"fastest_step_ms", t.fastest_seconds * 1e3},
                        {"peak_mib", mib(t.peak_bytes)},
                        {"rank0_mib", mib(t.rank0_bytes)},
                        {"wall_s", t.wall_seconds},
                        {"gemm_speed", t.gemm_speed},
                        {"step_series_ms", milliseconds(t.step_series_seconds)}});
    }
    const double figure = r.figure();
    const auto measured = [&](double v) { return figure > 0 ? nlohmann::json(v) : nullptr; };
    const CandidateRecord::Memory mem = r.least_memory();
    const TuneCandidate& c = r.candidate;
    layouts.push_back({{"layout", to_string(c.config)},
                       {"short", short_name(c.config)},
                       {"planner_rank", c.predicted_rank},
                       {"predicted_ms", c.predicted_seconds * 1e3},
                       {"predicted_mib", mib(c.predicted_bytes)},
                       {"predicted_rank0_mib", mib(c.predicted_rank0_bytes)},
                       {"measured_ms", measured(figure * 1e3)},
                       {"measured_fastest_ms", measured(r.fastest() * 1e3)},
                       {"measured_mib", measured(mib(mem.peak_bytes))},
                       {"measured_rank0_mib", measured(mib(mem.rank0_bytes))},
                       {"timed_steps", r.timed_steps()},
                       {"failed", r.failed},
                       {"last_round", r.last_round},
                       {"trials", trials}});
  }
  return layouts;
}

// 3. The table, the winner and the search in files: tune.json, tune.md, tune.svg (rank 0).
void Tune::write_files(const planner::HalvingOptions& h, const TuneOutcome& out,
                       const std::string& table, const nlohmann::json& refit) const {
  using namespace planner;
  const std::string dir =
      o.out.empty() ? (std::filesystem::path(cfg.run.out_dir) / "tune").string() : o.out;
  const nlohmann::json layouts = layouts_json(out);
  nlohmann::json j = {
      {"run", o.run},
      {"model", cfg.model.name},
      {"world", world_size},
      {"threads", threads},
      {"global_batch", job.global_batch},
      {"seq_len", job.seq_len},
      {"device", o.device},
      // What "measured_ms" is (planner::CandidateRecord::figure); --refit-from checks it.
      {"figure", "median step"},
      {"precision", precision_name(precision)},
      {"cluster", o.cluster},
      // fastest: over every probe; relative (to the preset's) and foreign: from the three before
      // the search, which the warning was given on.
      {"gemm_speed",
       {{"fastest", speed.fastest()},
        {"probes", speed.probes()},
        {"preset", cluster.gemm_speed},
        {"relative", relative},
        {"foreign", foreign}}},
      {"candidates", sr.candidates},
      {"infeasible", sr.infeasible.size()},
      {"infeasible_reasons", sr.reason_counts},
      {"feasible", sr.feasible},
      {"mode", o.grid ? "grid" : "halving"},
      {"passes", o.grid ? o.passes : 1},
      {"initial", r0},
      {"warmup", h.warmup},
      {"first_steps", h.first_steps},
      {"budget_trials", h.max_trials},
      {"budget_minutes", h.max_seconds / 60},
      {"trials", out.trials},
      {"steps", out.steps},
      {"rounds", out.rounds},
      {"budget_spent", out.budget_spent},
      {"stopped", out.stopped},
      {"seconds", seconds},
      {"winner", out.winner ? nlohmann::json(to_string(out.records[*out.winner].candidate.config))
                            : nlohmann::json()},
      {"winner_planner_rank", out.winner ? out.records[*out.winner].candidate.predicted_rank : 0},
      {"layouts", layouts},
      {"refit", refit},
  };
  std::filesystem::create_directories(dir);
  write_file_atomic(dir + "/tune.json", j.dump(2) + "\n").throw_if_error("weft tune");
  const std::string title =
      fmt::format("weft tune: {} on {} process(es), predicted vs measured step time",
                  cfg.model.name, world_size);
  write_file_atomic(dir + "/tune.svg", render_tune_svg(out, title)).throw_if_error("weft tune");
  std::string md = fmt::format("# {}\n\n{}\n", title, table);
  if (out.winner) {
    md += fmt::format("Winner: `{}`\n\n```toml\n{}```\n",
                      to_string(out.records[*out.winner].candidate.config),
                      keys_text(out.records[*out.winner].candidate.config));
  }
  write_file_atomic(dir + "/tune.md", md).throw_if_error("weft tune");
  fmt::print("wrote {}/tune.json, tune.md, tune.svg\n", dir);
}

void Tune::report_winner(const TuneOutcome& out) const {
  using namespace planner;
  if (!out.winner) {
    throw Error(
        "no layout completed a trial: see each one's error above (a larger --budget-minutes or "
        "--budget-trials runs more of them)");
  }
  const layout::Layout& best = out.records[*out.winner].candidate.config;
  say(fmt::format(
      "\nwinner: {} (the planner's #{}), measured fastest of the last round; paste "
      "into {}:\n\n{}",
      short_name(best), out.records[*out.winner].candidate.predicted_rank, o.run, keys_text(best)));
  if (!o.write.empty() && leader) {
    write_file_atomic(o.write,
                      set_toml_keys(read_text_file(o.run).value_or(""), run_config_keys_of(best)))
        .throw_if_error("cannot write " + o.write);
    fmt::print("\nwrote {} ({} with the winner's keys)\n", o.write, o.run);
  }
}

void Tune::run() {
  const std::vector<TuneCandidate> ranked = rank_layouts();
  const planner::HalvingOptions h = halving_options(ranked);
  const TuneOutcome out = run_trials(ranked, h);
  const std::string table = markdown_table(out);
  say(fmt::format("\n{}\n{} trials ({} steps) in {} round(s), {:.1f} s{}{}\n", table, out.trials,
                  out.steps, out.rounds, seconds, out.budget_spent ? "; the budget ended it" : "",
                  out.stopped ? "; stopped by a signal: the table so far" : ""));
  const nlohmann::json refit = refit_from_trials(out);
  if (leader) write_files(h, out, table, refit);
  report_winner(out);
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tune", "Find the fastest layout of a run by short real trials of the planner's best picks");
  auto o = std::make_shared<TuneOptions>();
  cmd->add_option("run", o->run, "run config (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", o->overrides, "override a key: section.key=value");
  cmd->add_option("--cluster", o->cluster, "cluster preset the planner prices with")
      ->check(CLI::ExistingFile);
  cmd->add_option("--budget-minutes", o->budget_minutes,
                  "wall minutes of trials (default 4 when no --budget-trials)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--budget-trials", o->budget_trials, "trials at most")->check(kPositive);
  cmd->add_option("--top", o->top, "the best-predicted layouts the first round runs")
      ->check(kPositive);
  cmd->add_option("--warmup", o->warmup, "untimed steps of each trial")->check(kNonNegative);
  cmd->add_option("--steps", o->steps, "timed steps of the first round's trials")->check(kPositive);
  cmd->add_option("--out", o->out,
                  "directory of tune.json, tune.md, tune.svg (default: "
                  "<run.out_dir>/tune)");
  cmd->add_option("--write", o->write, "write RUN.toml with the winner's keys to this file");
  auto* grid =
      cmd->add_flag("--grid", o->grid,
                    "run every one of the --top layouts once, at the halving's final trial length "
                    "(the baseline the halving saves trials against)");
  cmd->add_option("--passes", o->passes,
                  "with --grid: run the layouts this many times, one pass after the other; each "
                  "layout's figure is its fastest trial (on a machine shared with other jobs)")
      ->check(kPositive)
      ->needs(grid);
  cmd->add_option("--calibrate-out", o->calibrate_out,
                  "write the preset refitted from the trials to this file");
  cmd->add_flag("--update-calibration", o->update_calibration,
                "rewrite --cluster's preset with the refit");
  cmd->add_option("--device", o->device,
                  std::string("where the trials run, as `weft train --device`: ") + kDeviceHelp)
      ->capture_default_str();
  cmd->add_option("--refit-from", o->refit_from,
                  "tune.json of an earlier `weft tune` of the same run: its layouts' figures join "
                  "the refit (repeatable)")
      ->check(CLI::ExistingFile);
  cmd->callback([o] {
    // Listening until MPI_Finalize is over (core/stop_signals.h).
    const StopSignalListener signals;
    const JobWorld processes;
    try {
      Tune(*o, processes.world(), signals).run();
    } catch (const Error&) {
      // Every rank reaches the same verdict (the checks before the trials read the same files;
      // the search's decisions are reduced): rank 0 says it once.
      if (processes.world() != nullptr && processes.world()->rank() != 0) throw ExitQuietly{1};
      throw;
    }
  });
}

}  // namespace weft::cli
