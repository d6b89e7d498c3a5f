#include "weft/runtime/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "weft/checkpoint/checkpoint.h"
#include "weft/core/clock.h"
#include "weft/core/fault.h"
#include "weft/core/memory_usage.h"
#include "weft/core/node.h"
#include "weft/core/stop_signals.h"
#include "weft/data/bpe_tokenizer.h"
#include "weft/data/sampler.h"
#include "weft/kernels/kernels.h"
#include "weft/model/flops.h"
#include "weft/parallel/groups.h"
#include "weft/parallel/topology.h"
#include "weft/plot/plot.h"
#include "weft/runtime/checkpointing.h"
#include "weft/runtime/gemm_ceiling.h"
#include "weft/runtime/lr_schedule.h"
#include "weft/runtime/train_step.h"
#include "weft/schedule/schedule.h"

namespace weft::runtime {
namespace {

const char* signal_name(int sig) {
  return sig == SIGINT    ? "SIGINT"
         : sig == SIGTERM ? "SIGTERM"
         : sig == SIGUSR1 ? "SIGUSR1"
                          : "a stop request";
}

}  // namespace

Trainer::Trainer(config::RunConfig cfg, const data::TokenDataset& dataset, TrainerOptions options)
    : cfg_(std::move(cfg)), dataset_(&dataset), options_(std::move(options)) {}

Trainer::~Trainer() = default;

// Every rank's memory, measured against predicted (Engine::memory), on rank 0's progress output.
void Trainer::report_memory(Progress& progress, const parallel::Topology& topo,
                            comm::Communicator* world) const {
  const Engine::Memory mem = engine_->memory();
  const double mine[2] = {mem.used, mem.predicted};
  const int n = world != nullptr ? world->size() : 1;
  std::vector<double> all(2 * n);
  if (world != nullptr && n > 1) {
    world->all_gather(all.data(), mine, 2);
  } else {
    std::copy_n(mine, 2, all.data());
  }
  std::vector<std::string> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(fmt::format("{} {:.1f} / {:.1f} MiB ({:.0f}%)", topo.name(r),
                                all[2 * r] / (1 << 20), all[2 * r + 1] / (1 << 20),
                                100.0 * all[2 * r] / all[2 * r + 1]));
  }
  progress.message(fmt::format("weft train: {}: {}", mem.title, fmt::join(ranks, ", ")));
}

Result<TrainResult> Trainer::run() {
  namespace fs = std::filesystem;
  const auto& t = cfg_.train;
  const int T = t.seq_len, b = t.micro_batch, m = cfg_.microbatches();
  const EngineDevice device{options_.device, options_.device_group};
  const std::string root = cfg_.checkpoint_root();
  const std::string tokenizer =
      options_.tokenizer_spec.empty() ? cfg_.data.tokenizer : options_.tokenizer_spec;
  TrainResult result;

  // Where to start: decided (and checked) before anything is allocated or written.
  std::string resume_dir;
  if (options_.resume.empty() || options_.resume == "auto") {
    auto latest = checkpoint::find_latest(root);
    if (!latest.ok()) return latest.status();
    if (latest.value()) {
      if (options_.resume.empty()) {
        return Status::error(fmt::format(
            "{}: run.out_dir {} already holds checkpoints (latest {}): pass --resume to continue "
            "that run, or choose another run.out_dir",
            cfg_.origin, cfg_.run.out_dir, *latest.value()));
      }
      resume_dir = *latest.value();
    }
  } else {
    auto dir = checkpoint::resolve(options_.resume);
    if (!dir.ok()) return dir.status();
    resume_dir = dir.value();
  }

  // The process grid: checked before anything is allocated. Every rank reaches the same verdict.
  comm::Communicator* world = options_.world;
  const int world_size = world != nullptr ? world->size() : 1;
  const int world_rank = world != nullptr ? world->rank() : 0;
  if (Status s = config::validate_world(cfg_, world_size); !s.ok()) return s;
  // The layout, before anything is written (layout/validate.h, the rules the planner applies too).
  if (Status s = config::validate_layout(cfg_); !s.ok()) return s;
  // The checkpoint directory is made and checked writable now, not at the first save after
  // save_every steps of work; rank 0 removes what killed saves left behind.
  auto prepared = checkpoint::prepare_root(root, world_rank == 0);
  if (!prepared.ok()) return prepared.status();
  for (const std::string& dir : prepared.value()) {
    fmt::print(stderr, "weft train: removed {}, the leftover of a save that was killed\n", dir);
  }
  // The tokenizer travels with the checkpoints (ROOT/tokenizer): a run directory moved to another
  // machine still generates and exports (cli/checkpoint_tokenizer.h).
  if (world_rank == 0 && !tokenizer.empty() && tokenizer != "none") {
    if (Status s =
            data::copy_tokenizer_files(data::resolve_tokenizer_dir(tokenizer), root + "/tokenizer");
        !s.ok()) {
      return s.prefixed("cannot keep a copy of the tokenizer beside the checkpoints");
    }
  }
  const parallel::GridShape grid{cfg_.parallel.tp, cfg_.parallel.pp, cfg_.parallel.dp};
  const parallel::Topology topo(grid);
  if (world != nullptr && world_size > 1) groups_ = parallel::make_groups(*world, topo);
  const bool leader = world_rank == 0;
  kernels::set_num_threads(t.threads > 0 ? t.threads : threads_per_process(local_processes(1)));
  data::SamplerConfig scfg;
  scfg.seq_len = T;
  scfg.micro_batch = b;
  scfg.microbatches = m;
  scfg.val_fraction = cfg_.data.val_fraction;
  scfg.seed = static_cast<uint64_t>(t.seed);
  scfg.dp_rank = topo.coord(world_rank).dp;
  scfg.dp_size = grid.dp;
  auto sampler_or = data::Sampler::create(*dataset_, scfg);
  if (!sampler_or.ok()) return sampler_or.status();
  data::Sampler sampler = std::move(sampler_or).value();

  // This rank's engine: its model chunks, run by the pipeline schedule (pp = 1: one chunk, the
  // microbatches one after the other), and their optimizers.
  auto made = make_engine(cfg_, groups_, world, device);
  if (!made.ok()) return made.status();
  engine_ = std::move(made).value();
  // A resume loads every parameter and moment (padding stays zero): initializing first would only
  // cost time, most of a restart's for a large model (bench/results/checkpoint-*.md).
  if (resume_dir.empty()) engine_->init(static_cast<uint64_t>(t.seed));
  const LrSchedule schedule{t.lr, t.min_lr, t.warmup_steps, t.steps};

  std::FILE* const progress_out = options_.progress && leader ? stderr : nullptr;
  Progress progress(0, t.steps, t.log_every, Progress::stderr_is_tty(), progress_out);
  int64_t step = 0;
  std::string load_summary;  // "... MB in ... s, ... GB/s"
  if (!resume_dir.empty()) {
    checkpoint::TrainState state;
    auto loaded = load_checkpoint(engine_->checkpoint_job(), resume_dir, state);
    if (!loaded.ok()) return loaded.status();
    load_summary = loaded.value().summary();
    Status s = sampler.set_state({state.sampler_epoch, state.sampler_position});
    if (!s.ok()) return Status::error(fmt::format("{}: {}", resume_dir, s.message()));
    step = state.step;
    result.resumed_from = resume_dir;
    // The run config decides; a difference that changes the continuation deserves a word.
    std::vector<std::string> changed;
    if (state.seed != static_cast<uint64_t>(t.seed)) changed.push_back("train.seed");
    if (state.data_path != cfg_.data.train) changed.push_back("data.train");
    if (state.lr_schedule.lr != t.lr || state.lr_schedule.min_lr != t.min_lr ||
        state.lr_schedule.warmup_steps != t.warmup_steps ||
        state.lr_schedule.total_steps != t.steps) {
      changed.push_back("the learning-rate schedule");
    }
    if (!changed.empty()) {
      progress.message(fmt::format(
          "weft train: warning: {} differ(s) from checkpoint {}; continuing with the run config",
          fmt::join(changed, ", "), resume_dir));
    }
  }
  result.first_step = step;
  result.last_step = step;

  // Rank 0 owns the run directory: metrics, plot and checkpoints.
  std::optional<MetricsWriter> metrics;
  if (leader) {
    std::error_code ec;
    fs::create_directories(cfg_.run.out_dir, ec);
    if (ec) {
      return Status::error(
          fmt::format("{}: cannot create run.out_dir: {}", cfg_.run.out_dir, ec.message()));
    }
    auto metrics_or = MetricsWriter::open(cfg_.metrics_path(), step);
    if (!metrics_or.ok()) return metrics_or.status();
    metrics.emplace(std::move(metrics_or).value());
  }

  const double flops_per_step = model::model_flops_per_step(cfg_.model, t.global_batch, T);
  // The job's ceiling, measured at the start and again at every validation, when the run pauses
  // anyway (on rank 0, which writes the metrics), and the best of them kept: a ceiling measured
  // while other work shared the cores would make an unloaded step read above 100%
  // (docs/training.md).
  double ceiling = 0;
  const auto measure_ceiling = [&](bool fresh) {
    return options_.gemm_ceiling ? options_.gemm_ceiling(fresh) : engine_->gemm_ceiling(fresh);
  };
  if (options_.measure_gemm_ceiling && leader) ceiling = measure_ceiling(false);
  int64_t ceiling_step = step;  // the step of the last measurement
  progress = Progress(step, t.steps, t.log_every, Progress::stderr_is_tty(), progress_out);
  progress.message(fmt::format(
      "weft train: {} ({} parameters) on {}; T={} micro_batch={} global_batch={} (= {} x "
      "micro_batch{}), {} steps{}; {}GEMM ceiling {}; out_dir {}",
      cfg_.model.name, model::gpt_param_layout(cfg_.model).count(), dataset_->describe(), T, b,
      t.global_batch, m, grid.dp > 1 ? fmt::format(" on each of {} replicas", grid.dp) : "",
      t.steps,
      resume_dir.empty()
          ? ""
          : fmt::format(", resuming at step {} from {} ({})", step, resume_dir, load_summary),
      engine_->describe(),
      ceiling > 0 ? fmt::format("{:.1f} GFLOP/s", ceiling / 1e9) : "not measured",
      cfg_.run.out_dir));
  // A spec peak below a rate this machine just measured is not its peak (a base clock where the
  // cores boost, a core count too low); an MFU against it would read above 100%. It is dropped,
  // with a warning, whenever a ceiling above it is measured.
  double peak_flops = t.peak_gflops * 1e9;
  const auto check_peak = [&] {
    if (peak_flops <= 0 || ceiling <= peak_flops) return;
    progress.message(fmt::format(
        "weft train: warning: train.peak_gflops={} is below the GEMM rate measured on this job "
        "({:.1f} GFLOP/s), so it is not this machine's peak (a base clock where the cores boost?); "
        "MFU is reported against the GEMM ceiling only. Set it from the boost clock: cores x GHz x "
        "FLOP/cycle",
        t.peak_gflops, ceiling / 1e9));
    peak_flops = 0;
  };
  check_peak();
  const auto measure_ceiling_again = [&] {
    ceiling = std::max(ceiling, measure_ceiling(true));
    check_peak();
  };

  const int64_t last =
      options_.stop_after > 0 ? std::min<int64_t>(options_.stop_after, t.steps) : t.steps;
  std::vector<int32_t> tokens(static_cast<size_t>(m) * b * T), targets(tokens.size());
  int64_t saved_step = resume_dir.empty() ? -1 : step;
  int skipped_in_a_row = 0;

  auto save = [&]() -> Status {
    if (saved_step == step) return {};
    checkpoint::TrainState state;
    state.step = step;
    state.seed = static_cast<uint64_t>(t.seed);
    state.sampler_epoch = sampler.state().epoch;
    state.sampler_position = sampler.state().position;
    state.lr_schedule = {"warmup_cosine", t.lr, t.min_lr, t.warmup_steps, t.steps};
    state.tokenizer = tokenizer;
    state.tokenizer_identity = options_.tokenizer_identity;
    state.data_path = cfg_.data.train;
    state.run_config = cfg_.to_json();
    auto saved = save_checkpoint(engine_->checkpoint_job(), root, state, t.keep_last);
    if (!saved.ok()) return saved.status();
    result.checkpoint = saved.value().dir;
    saved_step = step;
    progress.message(
        fmt::format("weft train: checkpoint {} ({})", result.checkpoint, saved.value().summary()));
    // The gathered copies are gone: measure training's own peak from here on.
    reset_peak_resident();
    return {};
  };
  // The same eval_batches validation batches as one process would use, shared by the replicas.
  auto evaluate = [&]() -> float {
    const size_t block = static_cast<size_t>(b) * T;
    const int mine = sampler.val_batches_of_replica(t.eval_batches);
    std::vector<int32_t> vt(block * mine), vy(vt.size());
    for (int k = 0; k < mine; ++k) {
      sampler.val_batch(k, vt.data() + k * block, vy.data() + k * block);
    }
    return engine_->evaluate(vt.data(), vy.data(), mine, t.eval_batches);
  };

  // A stop request reaches the ranks at different moments: they agree on it before each step,
  // so all of them stop after the same one.
  auto all_ranks_stop = [&]() {
    int32_t stop = stop_.load() ? 1 : 0;
    if (world != nullptr && world_size > 1) world->all_reduce(&stop, 1, comm::ReduceOp::Max);
    return stop != 0;
  };
  // SIGINT/SIGTERM set stop_ (when main() routed them: core/stop_signals.h).
  std::optional<StopSignalListener> signals;
  if (options_.handle_signals) signals.emplace(stop_);
  while (step < last && !all_ranks_stop()) {
    const double lr = schedule.at(step);
    const int64_t epoch = sampler.state().epoch;
    sampler.next_batch(tokens.data(), targets.data());
    fault_point("step", step + 1);  // crash tests (core/fault.h)
    const auto t0 = std::chrono::steady_clock::now();
    const StepStats stats =
        engine_->step(tokens.data(), targets.data(), static_cast<float>(lr), t.clip);
    const double dt = seconds_since(t0);
    ++step;
    if (fault_requested("nan", step)) {  // crash tests: one parameter of this rank goes bad
      const float nan = std::nanf("");
      engine_->checkpoint_job().state->write(0, 0, 0, 1, &nan);
    }

    StepRecord r;
    r.step = step;
    r.loss = stats.loss;
    r.lr = lr;
    r.grad_norm = stats.grad_norm;
    r.step_seconds = dt;
    r.tokens_per_s = static_cast<double>(t.global_batch) * T / dt;
    // A step faster than the ceiling shows the ceiling was measured while something else held
    // the cores (the demo's first one read half the later ones, and its steps 160% of it): it is
    // measured again at once, at most once per log interval.
    if (ceiling > 0 && flops_per_step / dt > ceiling && step - ceiling_step >= t.log_every) {
      measure_ceiling_again();
      ceiling_step = step;
    }
    if (peak_flops > 0) r.mfu_spec = flops_per_step / (dt * peak_flops);
    if (ceiling > 0) r.mfu_gemm = flops_per_step / (dt * ceiling);
    r.skipped = stats.skipped;
    r.epoch = epoch;
    r.tokens = step * t.global_batch * T;
    if (t.eval_every > 0 && (step % t.eval_every == 0 || step == t.steps)) {
      r.val_loss = evaluate();
      if (ceiling > 0 && step < last) measure_ceiling_again();
    }
    r.peak_mem_bytes = peak_resident_bytes();
    skipped_in_a_row = stats.skipped ? skipped_in_a_row + 1 : 0;
    if (stats.skipped) {
      // Skipping helps against a bad batch or a spike, not against a corrupt state.
      Status finite = check_parameters_finite(engine_->checkpoint_job());
      if (!finite.ok()) {
        progress.finish();
        return Status::error(fmt::format(
            "step {}: {}; the state is corrupt (a memory error or a bug), so the run stops. {}",
            step, finite.message(),
            saved_step >= 0 ? fmt::format("The last checkpoint is from step {}.", saved_step)
                            : std::string("No checkpoint was written.")));
      }
      progress.message(fmt::format(
          "weft train: warning: step {}: non-finite loss ({}) or gradient norm ({}); the update "
          "was skipped",
          step, stats.loss, stats.grad_norm));
    }
    if (metrics) {
      Status s = metrics->write(r);
      if (!s.ok()) return s;
    }
    progress.update(r);
    result.records.push_back(r);
    result.last_step = step;
    if (t.max_skipped_steps > 0 && skipped_in_a_row >= t.max_skipped_steps) {
      // The same on every rank (the loss and norm are): all stop here, nothing more is saved, so
      // the last checkpoint is the last good state.
      progress.finish();
      return Status::error(fmt::format(
          "{} consecutive steps (through step {}) had a non-finite loss or gradient norm and made "
          "no update (train.max_skipped_steps={}); stopping. {}Lower train.lr or raise "
          "train.warmup_steps, check the data, or resume from a checkpoint.",
          skipped_in_a_row, step, t.max_skipped_steps,
          saved_step >= 0 ? fmt::format("The last checkpoint is from step {}. ", saved_step)
                          : std::string()));
    }
    if (options_.on_step) options_.on_step(r);
    if (t.save_every > 0 && step % t.save_every == 0) {
      Status s = save();
      if (!s.ok()) return s;
    }
  }
  progress.finish();
  report_memory(progress, topo, world);
  if (step < last) {  // the loop ended early: a stop request
    result.stopped = true;
    result.stop_signal = signals ? signals->signal() : 0;
  }
  Status s = save();
  if (!s.ok()) return s;
  if (result.stopped) {
    progress.message(fmt::format(
        "weft train: stopped by {} after step {}/{}; checkpoint {}. Continue with --resume.",
        signal_name(result.stop_signal), step, t.steps, result.checkpoint));
  }
  if (options_.write_plot && leader) {
    const std::string svg = (fs::path(cfg_.run.out_dir) / "loss.svg").string();
    s = plot::write_loss_plot(cfg_.metrics_path(), svg, cfg_.model.name);
    if (!s.ok()) progress.message("weft train: warning: no loss plot: " + s.message());
  }
  return result;
}

}  // namespace weft::runtime
