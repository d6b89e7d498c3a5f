#include "weft/runtime/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <optional>

#include "weft/checkpoint/checkpoint.h"
#include "weft/core/clock.h"
#include "weft/core/fault.h"
#include "weft/core/memory_usage.h"
#include "weft/core/node.h"
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
#include "weft/runtime/step_loop.h"
#include "weft/runtime/stragglers.h"
#include "weft/runtime/train_step.h"

namespace weft::runtime {
namespace {

const char* signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGUSR1";
}

// Every rank's memory, measured against predicted (Engine::memory), on rank 0's progress output.
void report_memory(const Engine::Memory& mem, Progress& progress, const parallel::Topology& topo,
                   comm::Communicator* world) {
  const double mine[2] = {mem.used, mem.predicted};
  const int n = world != nullptr ? world->size() : 1;
  const std::vector<double> all = comm::all_gather_values(world, mine);
  std::vector<std::string> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(fmt::format("{} {:.1f} / {:.1f} MiB ({:.0f}%)", topo.name(r),
                                all[2 * r] / (1 << 20), all[2 * r + 1] / (1 << 20),
                                100.0 * all[2 * r] / all[2 * r + 1]));
  }
  progress.message(fmt::format("weft train: {}: {}", mem.title, fmt::join(ranks, ", ")));
}

// Where a run starts: "" (fresh) or the checkpoint directory it resumes from, decided (and
// checked) before anything is allocated or written.
Result<std::string> start_point(const config::RunConfig& cfg, const std::string& resume,
                                const std::string& root) {
  if (!resume.empty() && resume != "auto") return checkpoint::resolve(resume);
  auto latest = checkpoint::find_latest(root);
  if (!latest.ok()) return latest.status();
  if (!latest.value()) return std::string();
  if (resume.empty()) {
    return Status::error(fmt::format(
        "{}: run.out_dir {} already holds checkpoints (latest {}): pass --resume to continue "
        "that run, or choose another run.out_dir",
        cfg.origin, cfg.run.out_dir, *latest.value()));
  }
  return *latest.value();
}

// The checkpoint directory, made and checked writable now, not at the first save after
// save_every steps of work; rank 0 removes what killed saves left behind and keeps the tokenizer
// beside the checkpoints (ROOT/tokenizer): a run directory moved to another machine still
// generates and exports (cli/checkpoint_tokenizer.h).
Status prepare_root(const std::string& root, const std::string& tokenizer, bool leader) {
  auto prepared = checkpoint::prepare_root(root, leader);
  if (!prepared.ok()) return prepared.status();
  for (const std::string& dir : prepared.value()) {
    fmt::print(stderr, "weft train: removed {}, the leftover of a save that was killed\n", dir);
  }
  if (!leader || tokenizer.empty() || tokenizer == "none") return {};
  return data::copy_tokenizer_files(data::resolve_tokenizer_dir(tokenizer), root + "/tokenizer")
      .prefixed("cannot keep a copy of the tokenizer beside the checkpoints");
}

// What of the run config differs from a checkpoint's record in a way that changes the
// continuation: the run config decides, and the difference deserves a word.
std::vector<std::string> changed_since(const config::RunConfig& cfg,
                                       const checkpoint::TrainState& state) {
  const auto& t = cfg.train;
  std::vector<std::string> changed;
  if (state.seed != static_cast<uint64_t>(t.seed)) changed.push_back("train.seed");
  if (state.data_path != cfg.data.train) changed.push_back("data.train");
  if (state.lr_schedule.lr != t.lr || state.lr_schedule.min_lr != t.min_lr ||
      state.lr_schedule.warmup_steps != t.warmup_steps ||
      state.lr_schedule.total_steps != t.steps) {
    changed.push_back("the learning-rate schedule");
  }
  return changed;
}

}  // namespace

Trainer::Trainer(config::RunConfig cfg, const data::TokenDataset& dataset, TrainerOptions options)
    : cfg_(std::move(cfg)), dataset_(&dataset), options_(std::move(options)) {}

Trainer::~Trainer() = default;

// MFU's two reference lines for a run (docs/training.md). The job's GEMM ceiling is measured at
// the start and again at every validation, when the run pauses anyway (on rank 0, which writes
// the metrics), and the best of them kept: a ceiling measured while other work shared the cores
// would make an unloaded step read above 100%. The spec peak (train.peak_gflops) is dropped, with
// a warning, whenever a ceiling above it is measured: it is then not this machine's peak (a base
// clock where the cores boost, a core count too low).
class Trainer::MfuReference {
 public:
  MfuReference(std::function<double(bool fresh)> measure, double peak_gflops, double flops_per_step,
               int log_every, Progress& progress)
      : measure_(std::move(measure)),
        peak_gflops_(peak_gflops),
        peak_flops_(peak_gflops * 1e9),
        flops_per_step_(flops_per_step),
        log_every_(log_every),
        progress_(progress) {}

  void measure_first(int64_t step) {
    ceiling_ = measure_(false);
    step_ = step;
  }
  double ceiling() const { return ceiling_; }
  void check_peak() {
    if (peak_flops_ <= 0 || ceiling_ <= peak_flops_) return;
    progress_.message(fmt::format(
        "weft train: warning: train.peak_gflops={} is below the GEMM rate measured on this job "
        "({:.1f} GFLOP/s), so it is not this machine's peak (a base clock where the cores boost?); "
        "MFU is reported against the GEMM ceiling only. Set it from the boost clock: cores x GHz x "
        "FLOP/cycle",
        peak_gflops_, ceiling_ / 1e9));
    peak_flops_ = 0;
  }
  void measure_again() {
    if (ceiling_ <= 0) return;  // never measured (not rank 0, or not asked for)
    ceiling_ = std::max(ceiling_, measure_(true));
    check_peak();
  }
  // The MFU fields of step `step`'s record, which took `seconds`. A step faster than the ceiling
  // shows the ceiling was measured while something else held the cores (the demo's first one read
  // half the later ones, and its steps 160% of it): it is measured again at once, at most once per
  // log interval.
  void record(StepRecord& r, double seconds, int64_t step) {
    if (ceiling_ > 0 && flops_per_step_ / seconds > ceiling_ && step - step_ >= log_every_) {
      measure_again();
      step_ = step;
    }
    if (peak_flops_ > 0) r.mfu_spec = flops_per_step_ / (seconds * peak_flops_);
    if (ceiling_ > 0) r.mfu_gemm = flops_per_step_ / (seconds * ceiling_);
  }

 private:
  std::function<double(bool)> measure_;
  double peak_gflops_, peak_flops_, flops_per_step_;
  int log_every_;
  Progress& progress_;
  double ceiling_ = 0;
  int64_t step_ = 0;  // the step of the last measurement
};

// One invocation's state, which the loop's parts share.
struct Trainer::Run {
  std::string root, tokenizer, resume_dir;
  comm::Communicator* world = nullptr;
  int world_size = 1;
  bool leader = true;
  std::optional<data::Sampler> sampler;
  std::optional<Progress> progress;
  std::optional<MfuReference> mfu;
  std::optional<MetricsWriter> metrics;
  std::optional<StragglerWatch> stragglers;
  std::optional<CheckpointSaver> saver;
  // The last step whose save was started (or loaded), and the last committed: an asynchronous
  // save is committed a step or more after it started.
  int64_t step = 0, last = 0, saved_step = -1, committed_step = -1;
  int skipped_in_a_row = 0;
  TrainResult result;
};

Result<TrainResult> Trainer::run() {
  Run run;
  run.root = cfg_.checkpoint_root();
  run.tokenizer = options_.tokenizer_spec.empty() ? cfg_.data.tokenizer : options_.tokenizer_spec;
  auto start = start_point(cfg_, options_.resume, run.root);
  if (!start.ok()) return start.status();
  run.resume_dir = start.value();
  // The process grid and the layout (layout/validate.h, the rules the planner applies too):
  // checked before anything is allocated or written. Every rank reaches the same verdict.
  run.world = options_.world;
  run.world_size = run.world != nullptr ? run.world->size() : 1;
  const int world_rank = run.world != nullptr ? run.world->rank() : 0;
  run.leader = world_rank == 0;
  if (Status s = config::validate_world(cfg_, run.world_size); !s.ok()) return s;
  if (Status s = config::validate_layout(cfg_); !s.ok()) return s;
  if (Status s = prepare_root(run.root, run.tokenizer, run.leader); !s.ok()) return s;
  const parallel::Topology topo(cfg_.parallel.grid());
  // The groups split from the world inherit its timeout.
  if (run.world != nullptr && cfg_.train.comm_timeout > 0) {
    run.world->set_timeout_seconds(cfg_.train.comm_timeout);
  }
  if (run.world != nullptr && run.world_size > 1) groups_ = parallel::make_groups(*run.world, topo);
  if (Status s = build(run, topo.coord(world_rank)); !s.ok()) return s;
  std::vector<std::string> rank_names;
  for (int r = 0; r < run.world_size; ++r) rank_names.push_back(topo.name(r));
  run.stragglers.emplace(run.world, std::move(rank_names));
  if (Status s = train(run); !s.ok()) return s;

  run.progress->finish();
  report_memory(engine_->memory(), *run.progress, topo, run.world);
  if (Status s = save(run, false); !s.ok()) return s;
  TrainResult& result = run.result;
  if (result.stopped) {
    run.progress->message(fmt::format(
        "weft train: stopped by {} after step {}/{}; checkpoint {}. Continue with --resume.",
        signal_name(result.stop_signal), run.step, cfg_.train.steps, result.checkpoint));
  }
  if (run.leader) {
    const std::string svg = (std::filesystem::path(cfg_.run.out_dir) / "loss.svg").string();
    Status s = plot::write_loss_plot(cfg_.metrics_path(), svg, cfg_.model.name);
    if (!s.ok()) run.progress->message("weft train: warning: no loss plot: " + s.message());
  }
  return std::move(run.result);
}

Status Trainer::build(Run& run, const parallel::Coord& me) {
  const auto& t = cfg_.train;
  const int T = t.seq_len, b = cfg_.parallel.micro_batch, m = cfg_.microbatches(),
            dp = cfg_.parallel.dp;
  kernels::set_num_threads(t.threads > 0 ? t.threads : threads_per_process(local_processes(1)));
  auto sampler = data::Sampler::create(*dataset_, cfg_.sampler(me.dp));
  if (!sampler.ok()) return sampler.status();
  run.sampler.emplace(std::move(sampler).value());

  // This rank's engine: its model chunks, run by the pipeline schedule (pp = 1: one chunk, the
  // microbatches one after the other), and their optimizers.
  auto made = make_engine(cfg_, groups_, run.world, options_.device);
  if (!made.ok()) return made.status();
  engine_ = std::move(made).value();
  // A resume loads every parameter and moment (padding stays zero): initializing first would only
  // cost time, most of a restart's for a large model (bench/results/checkpoint-*.md).
  if (run.resume_dir.empty()) engine_->runner().init(static_cast<uint64_t>(t.seed));

  std::FILE* const progress_out = options_.progress && run.leader ? stderr : nullptr;
  run.progress.emplace(0, t.steps, t.log_every, Progress::stderr_is_tty(), progress_out);
  std::string load_summary;  // "... MB in ... s, ... GB/s"
  if (!run.resume_dir.empty()) {
    checkpoint::TrainState state;
    auto loaded = load_checkpoint(engine_->checkpoint_job(), run.resume_dir, state);
    if (!loaded.ok()) return loaded.status();
    load_summary = loaded.value().summary();
    Status s = run.sampler->set_state({state.sampler_epoch, state.sampler_position});
    if (!s.ok()) return Status::error(fmt::format("{}: {}", run.resume_dir, s.message()));
    run.step = state.step;
    run.saved_step = state.step;
    run.committed_step = state.step;
    run.result.resumed_from = run.resume_dir;
    if (const auto changed = changed_since(cfg_, state); !changed.empty()) {
      run.progress->message(fmt::format(
          "weft train: warning: {} differ(s) from checkpoint {}; continuing with the run config",
          fmt::join(changed, ", "), run.resume_dir));
    }
  }
  run.saver.emplace(engine_->checkpoint_job(), run.root, t.keep_last);
  if (cfg_.keeps_snapshot()) run.saver->reserve_snapshot();
  run.result.first_step = run.step;
  run.result.last_step = run.step;
  run.last = options_.stop_after > 0 ? std::min<int64_t>(options_.stop_after, t.steps) : t.steps;

  // Rank 0 owns the run directory: metrics, plot and checkpoints.
  if (run.leader) {
    std::error_code ec;
    std::filesystem::create_directories(cfg_.run.out_dir, ec);
    if (ec) {
      return Status::error(
          fmt::format("{}: cannot create run.out_dir: {}", cfg_.run.out_dir, ec.message()));
    }
    auto metrics = MetricsWriter::open(cfg_.metrics_path(), run.step);
    if (!metrics.ok()) return metrics.status();
    run.metrics.emplace(std::move(metrics).value());
  }

  run.progress.emplace(run.step, t.steps, t.log_every, Progress::stderr_is_tty(), progress_out);
  auto measure = [this](bool fresh) {
    return options_.gemm_ceiling ? options_.gemm_ceiling(fresh) : engine_->gemm_ceiling(fresh);
  };
  run.mfu.emplace(measure, t.peak_gflops,
                  model::model_flops_per_step(cfg_.model, t.global_batch, T), t.log_every,
                  *run.progress);
  if (options_.measure_gemm_ceiling && run.leader) run.mfu->measure_first(run.step);
  const double ceiling = run.mfu->ceiling();
  run.progress->message(fmt::format(
      "weft train: {} ({} parameters) on {}; T={} micro_batch={} global_batch={} (= {} x "
      "micro_batch{}), {} steps{}; {}GEMM ceiling {}; out_dir {}",
      cfg_.model.name, model::gpt_param_layout(cfg_.model).count(), dataset_->describe(), T, b,
      t.global_batch, m, dp > 1 ? fmt::format(" on each of {} replicas", dp) : "", t.steps,
      run.resume_dir.empty() ? ""
                             : fmt::format(", resuming at step {} from {} ({})", run.step,
                                           run.resume_dir, load_summary),
      engine_->describe(),
      ceiling > 0 ? fmt::format("{:.1f} GFLOP/s", ceiling / 1e9) : "not measured",
      cfg_.run.out_dir));
  run.mfu->check_peak();
  return {};
}

Status Trainer::save(Run& run, bool background) {
  Status s;
  if (run.saved_step == run.step) {
    s = run.saver->finish();  // the end of the run: a save in flight is committed
  } else {
    const auto& t = cfg_.train;
    checkpoint::TrainState state;
    state.step = run.step;
    state.seed = static_cast<uint64_t>(t.seed);
    state.sampler_epoch = run.sampler->state().epoch;
    state.sampler_position = run.sampler->state().position;
    state.lr_schedule = {"warmup_cosine", t.lr, t.min_lr, t.warmup_steps, t.steps};
    state.tokenizer = run.tokenizer;
    state.tokenizer_identity = options_.tokenizer_identity;
    state.data_path = cfg_.data.train;
    state.run_config = cfg_.to_json();
    s = background ? run.saver->save_async(state) : run.saver->save(state);
    if (s.ok()) run.saved_step = run.step;
  }
  report_saves(run);
  return s;
}

void Trainer::report_saves(Run& run) {
  for (const CheckpointIo& io : run.saver->take_committed()) {
    run.result.checkpoint = io.dir;
    run.committed_step = io.step;
    run.progress->message(fmt::format("weft train: checkpoint {} ({})", io.dir, io.summary()));
    // The gathered copies are gone: measure training's own peak from here on.
    reset_peak_resident();
  }
}

// The same eval_batches validation batches as one process would use, shared by the replicas.
float Trainer::evaluate(Run& run) {
  const auto& t = cfg_.train;
  const size_t block = static_cast<size_t>(cfg_.parallel.micro_batch) * t.seq_len;
  const int mine = run.sampler->val_batches_of_replica(t.eval_batches);
  std::vector<int32_t> vt(block * mine), vy(vt.size());
  for (int k = 0; k < mine; ++k) {
    run.sampler->val_batch(k, vt.data() + k * block, vy.data() + k * block);
  }
  return engine_->runner().evaluate(vt.data(), vy.data(), mine, t.eval_batches);
}

Status Trainer::train(Run& run) {
  const auto& t = cfg_.train;
  const LrSchedule schedule{t.lr, t.min_lr, t.warmup_steps, t.steps};
  StepLoop loop(*engine_, cfg_, batches_of(*run.sampler), nullptr, run.step);
  // A stop signal reaches the ranks at different moments: they agree on it before each step, so
  // all of them stop after the same one, and the leader names it even when its own has not
  // arrived yet.
  int32_t stop = 0;
  auto all_ranks_stop = [&]() {
    stop = options_.signals != nullptr ? options_.signals->signal() : 0;
    if (run.world != nullptr && run.world_size > 1) {
      run.world->all_reduce(&stop, 1, comm::ReduceOp::Max);
    }
    return stop != 0;
  };
  while (run.step < run.last && !all_ranks_stop()) {
    fault_point("step", run.step + 1);                 // crash tests (core/fault.h)
    const int64_t epoch = run.sampler->state().epoch;  // of this step's first sequence
    StepRecord r = loop.step(schedule.at(run.step), t.clip);
    r.epoch = epoch;
    run.step = r.step;
    run.stragglers->add(r);
    if (run.step % t.log_every == 0) {  // every rank at the same steps: it gathers
      if (const std::string w = run.stragglers->end_interval(r); !w.empty()) {
        run.progress->message(w);
      }
    }
    if (fault_requested("nan", run.step)) {  // crash tests: one parameter of this rank goes bad
      const float nan = std::nanf("");
      engine_->checkpoint_job().state->write(0, 0, 0, 1, &nan);
    }
    run.mfu->record(r, r.step_seconds, run.step);
    if (t.eval_every > 0 && (run.step % t.eval_every == 0 || run.step == t.steps)) {
      r.val_loss = evaluate(run);
      if (run.step < run.last) run.mfu->measure_again();
    }
    r.peak_mem_bytes = peak_resident_bytes();
    if (Status s = after_step(run, r); !s.ok()) return s;
  }
  if (run.step < run.last) {  // the loop ended early: a stop signal
    run.result.stopped = true;
    run.result.stop_signal = stop;
  }
  return {};
}

Status Trainer::after_step(Run& run, StepRecord& r) {
  const auto& t = cfg_.train;
  run.skipped_in_a_row = r.skipped ? run.skipped_in_a_row + 1 : 0;
  if (r.skipped) {
    // Skipping helps against a bad batch or a spike, not against a corrupt state.
    Status finite = check_parameters_finite(engine_->checkpoint_job());
    if (!finite.ok()) {
      return give_up(run, fmt::format("step {}: {}; the state is corrupt (a memory error or a "
                                      "bug), so the run stops.",
                                      r.step, finite.message()));
    }
    run.progress->message(fmt::format(
        "weft train: warning: step {}: non-finite loss ({}) or gradient norm ({}); the update "
        "was skipped",
        r.step, r.loss, r.grad_norm));
  }
  // The same on every rank (the loss and norm are): all stop after this step, and nothing more
  // is saved, so the last checkpoint is the last good state.
  const bool giving_up = t.max_skipped_steps > 0 && run.skipped_in_a_row >= t.max_skipped_steps;
  // Checkpoints (every rank at the same steps): a save in flight is committed once every rank has
  // written its part; a periodic save before the last step goes to the background
  // (train.async_checkpoint), the last one is written at once after the loop.
  const auto t0 = std::chrono::steady_clock::now();
  Status saved = run.saver->poll();
  const bool saving = saved.ok() && !giving_up && t.save_every > 0 && run.step % t.save_every == 0;
  const int64_t committed = run.committed_step;
  if (saving) {
    saved = save(run, t.async_checkpoint && run.step < run.last);
  } else {
    report_saves(run);
  }
  if (saving || run.committed_step != committed) r.checkpoint_seconds = seconds_since(t0);
  if (run.metrics) {
    if (Status s = run.metrics->write(r); !s.ok()) return s;
  }
  run.progress->update(r);
  run.result.records.push_back(r);
  run.result.last_step = run.step;
  if (!saved.ok()) return saved;
  if (giving_up) {
    return give_up(run,
                   fmt::format("{} consecutive steps (through step {}) had a non-finite loss or "
                               "gradient norm and made no update (train.max_skipped_steps={}); "
                               "stopping.",
                               run.skipped_in_a_row, r.step, t.max_skipped_steps),
                   "Lower train.lr or raise train.warmup_steps, check the data, or resume from a "
                   "checkpoint.");
  }
  if (options_.on_step) options_.on_step(r);
  return {};
}

Status Trainer::give_up(Run& run, const std::string& why, const std::string& advice) {
  // The save in flight holds an earlier, good state: committed first, it is the one named.
  Status drained = run.saver->finish();
  report_saves(run);
  run.progress->finish();
  std::string text = why + " ";
  if (!drained.ok()) text += "The save in flight failed: " + drained.message() + " ";
  text += run.committed_step >= 0
              ? fmt::format("The last checkpoint is from step {}.", run.committed_step)
              : std::string("No checkpoint was written.");
  if (!advice.empty()) text += " " + advice;
  return Status::error(text);
}

}  // namespace weft::runtime
