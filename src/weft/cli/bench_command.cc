// weft bench step: time training steps (forward, backward, AdamW) of a model on random tokens and
// report tokens/s, model FLOP/s against the GEMM ceiling measured in the same run (and the spec
// peak, --peak-tflops), and predicted versus measured memory. The steps are `weft train`'s: the
// engine runtime::make_engine builds for the run the options describe, stepped by the shared
// runtime::StepLoop, on any backend (--device) and any layout (under `mpirun -n TP*PP*DP`).
//
// On the CPU (fp32; --precision bf16 runs the linear layers' GEMMs with bf16 inputs, and the
// reported ceiling stays the fp32 one with the bf16 ceiling on the same shapes next to it) the
// ceiling is measured between the timed steps; each rank measures it at its own thread count at
// the same moment and the job's ceiling is their sum. On a device (cuda, host-bf16: bf16 mixed
// precision) the ceiling is the backend's forward GEMM shapes, the memory its allocated bytes, the
// host waits per step are counted and --profile times one more step op by op.
//
// Every rank runs the step and rank 0 reports it: with tp the share of the step spent in the tp
// group's host collectives (the Recording communicator: from each call until its wait returned);
// with pp the bubble, measured and simulated; with dp the reductions' time left exposed.

#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "weft/cli/commands.h"
#include "weft/cli/device.h"
#include "weft/cli/job_world.h"
#include "weft/cli/launch_check.h"
#include "weft/cli/validators.h"
#include "weft/comm/mpi_communicator.h"
#include "weft/comm/recording_communicator.h"
#include "weft/config/run_config.h"
#include "weft/core/clock.h"
#include "weft/core/node.h"
#include "weft/core/rng.h"
#include "weft/kernels/kernels.h"
#include "weft/kernels/profiling_backend.h"
#include "weft/model/flops.h"
#include "weft/model/memory.h"
#include "weft/parallel/groups.h"
#include "weft/runtime/engine.h"
#include "weft/runtime/gemm_ceiling.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/runtime/step_loop.h"
#include "weft/schedule/simulate.h"

namespace weft::cli {
namespace {

struct BenchOptions {
  std::string model_path;
  int batch = 4, seq = 64, steps = 5, warmup = 1, threads = 0;
  std::string recompute = "none";
  std::string precision = "f32";
  bool json = false;
  int tp = 1, pp = 1, dp = 1, vp = 1, microbatches = 1, zero = 0;
  std::string schedule = "1f1b";
  bool sequence_parallel = false;
  std::string device = "cpu";
  double peak_tflops = 0;
  bool profile = false;
};

double mib(double bytes) { return bytes / (1 << 20); }

// The benchmark's n random tokens below `vocab`: a pure function of the index, like everything
// random in weft, so every rank and every device times the same data.
std::vector<int32_t> bench_tokens(int vocab, size_t n) {
  std::vector<int32_t> tokens(n);
  const uint64_t key = stream_key(7, "bench.tokens");
  for (size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>(uniform_at(key, i) * vocab) % vocab;
  }
  return tokens;
}

// The run a benchmark times, as `weft train` would run it: the model at --batch x --seq, the
// options' layout, --microbatches per replica; lr 3e-4 with clipping at 1 (the values do not
// matter, only that every step does all of a step's work).
config::RunConfig bench_run(const BenchOptions& o) {
  const auto recompute = model::parse_recompute(o.recompute);
  if (!recompute) {
    throw Error("--recompute must be none, selective or full, not '" + o.recompute + "'");
  }
  config::RunConfig cfg;
  cfg.origin = "weft bench step";
  cfg.model_config = o.model_path;
  cfg.model = model::load_gpt_config(o.model_path).value_or_throw("invalid model config");
  model::validate_for_run(cfg.model, o.seq)
      .throw_if_error("invalid run of '" + cfg.model.name + "'");
  cfg.parallel = {.tp = o.tp,
                  .pp = o.pp,
                  .dp = o.dp,
                  .vp = o.vp,
                  .micro_batch = o.batch,
                  .schedule = schedule::parse_kind(o.schedule).value_or_throw("--schedule"),
                  .recompute = *recompute,
                  .sequence_parallel = o.sequence_parallel && o.tp > 1,
                  .zero = o.zero};
  cfg.train.seq_len = o.seq;
  cfg.train.global_batch = o.batch * o.microbatches * o.dp;
  cfg.train.steps = o.warmup + o.steps;
  cfg.train.lr = 3e-4;
  cfg.train.clip = 1.0;
  cfg.train.threads = o.threads;
  return cfg;
}

// The same schedule simulated with each stage's forward priced by its FLOPs per token (PTD-P
// appendix: 2W + 4sh per layer, W its linears' weights (model/flops.h; GPT-2: 12h^2), 2hV for the
// LM head), backward = 2 x forward, free messages.
double simulated_bubble(const model::GptConfig& cfg, const schedule::Schedule& sched, int T) {
  schedule::Costs costs = schedule::uniform_costs(sched.shape, {});
  for (int st = 0; st < sched.shape.num_stages(); ++st) {
    const model::StageSpec spec = model::pipeline_stage(cfg, st, sched.shape.num_stages());
    const double h = cfg.n_embd;
    const double f = (spec.end_layer(cfg) - spec.first_layer) *
                         (2 * model::layer_linear_weights(cfg) + 4.0 * T * h) +
                     (spec.head ? 2 * h * cfg.padded_vocab() : 0.0);
    costs.stages[st] = {f, 2 * f, f, f};
  }
  return schedule::simulate(sched, costs).bubble_fraction;
}

// Data parallelism: the gradient reductions' time left exposed (waited for) per step, against the
// same reductions run alone (the median of three): the rest was hidden under backward.
struct DpReductions {
  double exposed = 0, alone = 0;
  double hidden() const { return alone > 0 ? std::clamp(1.0 - exposed / alone, 0.0, 1.0) : 0.0; }
};
DpReductions dp_reductions(runtime::PipelineRunner& runner, int steps, int microbatches) {
  DpReductions d;
  for (optim::DistributedOptimizer* opt : runner.optimizers()) {
    d.exposed += opt->reduction_wait_seconds() / steps;
  }
  std::vector<double> runs;
  for (int k = 0; k < 3; ++k) {
    double a = 0;
    for (optim::DistributedOptimizer* opt : runner.optimizers()) {
      a += opt->time_reductions_alone(microbatches);
    }
    runs.push_back(a);
  }
  d.alone = median(runs);
  return d;
}

// The GEMM ceiling of a host benchmark, measured between the timed steps (ceiling, step,
// ceiling, ..., step, ceiling), each step compared with the mean of the two ceilings around it:
// on a shared machine the load drifts, and a ceiling measured once, at another moment, compared
// two different machines (a loaded step read 38% of an idle ceiling; an idle step 160% of a
// loaded one). The ranks' rates add up: their FLOPs summed, the slowest rank's time kept.
class InterleavedCeiling {
 public:
  InterleavedCeiling(const model::GptConfig& cfg, int B, int T)
      : meter_(model::training_gemm_shapes(cfg, B, T)) {}
  void measure(runtime::Engine& engine, comm::Communicator* world) {
    if (world) world->barrier();
    runtime::GemmCeiling c;
    engine.outside_training([&] { c = meter_.measure(2); });
    if (world) {
      world->all_reduce(&c.flops, 1);
      world->all_reduce(&c.seconds, 1, comm::ReduceOp::Max);
    }
    rates_.push_back(c.rate());
  }
  // Step i's model FLOP/s over the ceilings around it, the median over the steps.
  double median_ratio(double flops, const std::vector<double>& times) const {
    std::vector<double> ratios;
    for (size_t i = 0; i < times.size(); ++i) {
      ratios.push_back(flops / times[i] / (0.5 * (rates_[i] + rates_[i + 1])));
    }
    return median(ratios);
  }
  double rate() const { return median(rates_); }
  double spread() const {
    return *std::max_element(rates_.begin(), rates_.end()) /
           *std::min_element(rates_.begin(), rates_.end());
  }
  double bf16_rate() { return meter_.measure(5, kernels::MatmulPrecision::BF16).rate(); }

 private:
  runtime::GemmCeilingMeter meter_;
  std::vector<double> rates_;
};

// One benchmark's job on this rank, as build_bench makes it: the run, its backend (a device on
// the profiling wrapper, or the CPU), the groups (the tp group recording its collectives' time),
// the host's interleaved ceiling and the engine. Members in the order they must outlive each
// other: the engine is destroyed first.
struct Bench {
  config::RunConfig cfg;
  comm::Communicator* world = nullptr;
  int world_size = 1, threads = 1;
  bool host = true, bf16 = false;
  std::unique_ptr<kernels::Backend> device;
  std::unique_ptr<kernels::ProfilingBackend> profiler;  // forwards untimed until --profile's step
  parallel::ProcessGroups groups;
  std::shared_ptr<comm::CommRecorder> recorder = std::make_shared<comm::CommRecorder>();
  std::optional<InterleavedCeiling> ceiling;  // the host's
  std::unique_ptr<runtime::Engine> engine;
};

void build_bench(Bench& b, const BenchOptions& o, comm::Communicator* world) {
  b.world = world;
  b.world_size = world ? world->size() : 1;
  b.host = o.device == "cpu";
  b.cfg = bench_run(o);
  const layout::Layout& L = b.cfg.parallel;
  if (L.tp * L.pp * L.dp != b.world_size) {
    throw Error(
        fmt::format("--tp {} x --pp {} x --dp {} needs {} processes (mpirun -n {}); {} started",
                    L.tp, L.pp, L.dp, L.tp * L.pp * L.dp, L.tp * L.pp * L.dp, b.world_size));
  }
  config::validate_layout(b.cfg).throw_if_error("invalid layout");
  const parallel::Topology topo(L.grid());
  b.threads = o.threads > 0 ? o.threads : threads_per_process(b.world_size);
  kernels::set_num_threads(b.threads);
  b.bf16 = b.host && o.precision == "bf16";
  kernels::set_matmul_precision(b.bf16 ? kernels::MatmulPrecision::BF16
                                       : kernels::MatmulPrecision::F32);
  runtime::EngineDevice on;
  if (b.host) {
    check_host_memory(planned_run(b.cfg, b.world_size).value_or_throw("invalid run"),
                      local_processes(b.world_size), "this benchmark", world)
        .throw_if_error("cannot run");
  } else {  // the arena sized as `weft train --device` sizes it
    b.device = make_device(o.device, b.cfg, world);
    b.profiler = std::make_unique<kernels::ProfilingBackend>(*b.device);
    on = {.backend = b.profiler.get(), .group = device_group_maker(o.device, *b.device)};
  }
  if (b.world_size > 1) b.groups = parallel::make_groups(*world, topo);
  if (b.groups.tp) {
    b.groups.tp = std::make_unique<comm::RecordingCommunicator>(std::move(b.groups.tp), b.recorder);
  }
  // The ceiling's buffers come before the engine: the model's memory is what follows.
  if (b.host) b.ceiling.emplace(b.cfg.model, L.micro_batch, b.cfg.train.seq_len);
  b.engine = runtime::make_engine(b.cfg, b.groups, world, on).value_or_throw("cannot build");
  b.engine->runner().init(static_cast<uint64_t>(b.cfg.train.seed));
}

// What the timed steps measured on this rank.
struct Timed {
  std::vector<double> times;  // each timed step's seconds
  runtime::StepRecord last;
  double comm_seconds = 0, waiting = 0, busy = 0;
  double host_waits = 0;  // per step: calls that made the host wait for the device (docs/cuda.md)
  double profiled_seconds = 0;
  std::vector<kernels::ProfilingBackend::OpTime> ops;  // --profile's step, op by op
};

Timed run_steps(Bench& b, const BenchOptions& o) {
  const int m = o.microbatches;
  const size_t n = size_t(m) * o.batch * o.seq;
  const std::vector<int32_t> tokens = bench_tokens(b.cfg.model.vocab_size, n + 1);
  runtime::StepLoop loop(
      *b.engine, b.cfg,
      [&](int32_t* x, int32_t* y) {
        std::copy_n(tokens.data(), n, x);
        std::copy_n(tokens.data() + 1, n, y);
      },
      b.world);
  runtime::PipelineRunner& runner = b.engine->runner();
  Timed t;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    b.recorder->clear();
    if (s == o.warmup) {
      for (optim::DistributedOptimizer* opt : runner.optimizers()) opt->reset_reduction_wait();
      if (b.profiler) b.profiler->reset_host_waits();
    }
    if (s >= o.warmup && b.ceiling) b.ceiling->measure(*b.engine, b.world);
    t.last = loop.step(b.cfg.train.lr, b.cfg.train.clip);
    if (s >= o.warmup) {
      t.times.push_back(t.last.step_seconds);
      t.comm_seconds += b.recorder->seconds();
      t.waiting += runner.last_timing().waiting;
      t.busy += runner.last_timing().seconds - runner.last_timing().waiting;
    }
  }
  if (b.ceiling) b.ceiling->measure(*b.engine, b.world);
  if (b.profiler) {
    t.host_waits = static_cast<double>(b.profiler->host_waits()) / o.steps;
    if (o.profile) {  // one more step with every op timed on its own
      b.profiler->set_enabled(true);
      t.profiled_seconds = loop.step(b.cfg.train.lr, b.cfg.train.clip).step_seconds;
      b.profiler->set_enabled(false);
      t.ops = b.profiler->times();
    }
  }
  return t;
}

// The job's figures from every rank's measurements (collective): the JSON line `--json` prints.
nlohmann::json job_figures(Bench& b, const BenchOptions& o, Timed& t) {
  comm::Communicator* world = b.world;
  const layout::Layout& L = b.cfg.parallel;
  const int B = o.batch, T = o.seq, m = o.microbatches, n = b.world_size;
  // The slowest rank's time is the step's; the bubble is Narayanan et al.'s: total waiting over
  // total busy time, summed over the ranks.
  std::vector<double> waits(n, t.waiting), busies(n, t.busy);
  if (world) {
    world->all_reduce(t.times.data(), static_cast<int64_t>(t.times.size()), comm::ReduceOp::Max);
    world->all_gather(waits.data(), &t.waiting, 1);
    world->all_gather(busies.data(), &t.busy, 1);
  }
  std::vector<double> waiting_share(n);
  for (int r = 0; r < n; ++r) waiting_share[r] = waits[r] / (waits[r] + busies[r]);
  const double total_time = std::accumulate(t.times.begin(), t.times.end(), 0.0);
  const double bubble = std::accumulate(waits.begin(), waits.end(), 0.0) /
                        std::accumulate(busies.begin(), busies.end(), 0.0);
  runtime::PipelineRunner& runner = b.engine->runner();
  const DpReductions dp = L.dp > 1 ? dp_reductions(runner, o.steps, m) : DpReductions{};
  // Per rank: measured memory (host: peak resident above the start, the ceilings' bursts set
  // aside; a device: its allocated bytes) over its prediction; the job's worst rank.
  const runtime::Engine::Memory mine = b.engine->memory();
  double mem[3] = {mine.used, mine.predicted, mine.used / mine.predicted};
  if (world) world->all_reduce(mem, 3, comm::ReduceOp::Max);
  const double measured = mem[0], predicted = mem[1], mem_ratio = mem[2];
  const double flops = model::model_flops_per_step(b.cfg.model, double(B) * m * L.dp, T);
  const double gemm_ratio = b.ceiling ? b.ceiling->median_ratio(flops, t.times) : 0.0;
  const double step_s = median(t.times), achieved = flops / step_s;
  // The reference lines: a host's interleaved ceiling (and its bf16 twin with --precision bf16),
  // a device's forward GEMM shapes measured once; the spec peak when given.
  const double ceiling = b.ceiling ? b.ceiling->rate() : b.engine->gemm_ceiling(true);
  const double mfu_gemm = b.ceiling ? gemm_ratio : ceiling > 0 ? achieved / ceiling : 0.0;
  const double ceiling_bf16 = b.bf16 ? b.ceiling->bf16_rate() : 0.0;
  kernels::set_matmul_precision(kernels::MatmulPrecision::F32);
  const double peak = o.peak_tflops * 1e12;
  const auto or_null = [](bool known, double v) {
    return known ? nlohmann::json(v) : nlohmann::json();
  };
  nlohmann::json j = {
      {"name", "weft"},
      {"device", b.host ? std::string("cpu") : b.device->name()},
      {"model", b.cfg.model.name},
      {"params", model::gpt_param_layout(b.cfg.model).count()},
      {"B", B},
      {"T", T},
      {"microbatches", m},
      {"threads", b.threads},
      {"ranks", n},
      {"tp", L.tp},
      {"pp", L.pp},
      {"dp", L.dp},
      {"vp", L.vp},
      {"schedule", o.schedule},
      {"sequence_parallel", L.sequence_parallel},
      {"zero", L.zero},
      {"dp_reduction_exposed_ms", dp.exposed * 1e3},
      {"dp_reduction_alone_ms", dp.alone * 1e3},
      {"dp_reduction_hidden", dp.hidden()},
      {"comm_share", t.comm_seconds / total_time},
      {"bubble_measured", bubble},
      {"bubble_simulated", simulated_bubble(b.cfg.model, b.engine->runner().schedule(), T)},
      {"waiting_share_per_rank", waiting_share},
      {"recompute", o.recompute},
      {"precision", b.host ? o.precision : std::string("bf16-mixed")},
      {"ms_median", step_s * 1e3},
      {"ms_min", std::ranges::min(t.times) * 1e3},
      {"tokens_per_s", double(m) * B * T * L.dp / step_s},
      {"model_flops_per_step", flops},
      {"model_gflops", achieved / 1e9},
      {"model_tflops", achieved / 1e12},
      {"peak_tflops", o.peak_tflops},
      {"mfu_spec", or_null(peak > 0, achieved / peak)},
      {"gemm_ceiling_gflops", ceiling / 1e9},
      {"gemm_ceiling_tflops", ceiling / 1e12},
      {"ratio_to_gemm_ceiling", mfu_gemm},
      {"mfu_gemm", or_null(ceiling > 0, mfu_gemm)},
      {"gemm_ceiling_spread", or_null(b.host, b.ceiling ? b.ceiling->spread() : 0.0)},
      {"gemm_ceiling_bf16_gflops", or_null(b.bf16, ceiling_bf16 / 1e9)},
      {"host_waits_per_step", or_null(!b.host, t.host_waits)},
      {"loss", t.last.loss},
      {"mem_predicted_mib", mib(predicted)},
      {"mem_measured_mib", mib(measured)},
      {"mem_allocated_mib", or_null(!b.host, mib(measured))},
      {"mem_measured_over_predicted", mem_ratio},
  };
  if (!t.ops.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& op : t.ops) {
      rows.push_back({{"op", op.op}, {"calls", op.calls}, {"ms", op.seconds * 1e3}});
    }
    j["profile"] = {{"step_ms", t.profiled_seconds * 1e3}, {"ops", rows}};
  }
  return j;
}

// The report a person reads: the figures of `j`, and this rank's predicted memory term by term.
void print_report(const Bench& b, const BenchOptions& o, const nlohmann::json& j, const Timed& t) {
  const layout::Layout& L = b.cfg.parallel;
  const auto num = [&j](const char* key) { return j[key].get<double>(); };
  const double step_ms = num("ms_median"), achieved = num("model_gflops") * 1e9;
  // FLOP/s in the unit that reads: GFLOP/s on a CPU, TFLOP/s on a device.
  const double unit = b.host ? 1e9 : 1e12;
  std::string layout;
  if (L.tp > 1) {
    layout += fmt::format(", tp={}{}", L.tp, L.sequence_parallel ? " (sequence parallel)" : "");
  }
  if (L.pp > 1) layout += fmt::format(", pp={} vp={} {}", L.pp, L.vp, o.schedule);
  if (L.dp > 1) layout += fmt::format(", dp={} zero={}", L.dp, L.zero);
  fmt::print(
      "weft bench step: {} ({} parameters){}, B={} T={} x {} microbatch(es), {} rank(s){}, "
      "recompute={}, precision={}\n",
      b.cfg.model.name, model::gpt_param_layout(b.cfg.model).count(),
      b.host ? fmt::format(", {} threads", b.threads) : " on " + b.device->name(), o.batch, o.seq,
      o.microbatches, b.world_size, layout, o.recompute, b.host ? o.precision : "bf16 mixed");
  fmt::print("  step          {:9.2f} ms (median of {}; min {:.2f} ms)   loss {:.4f}\n", step_ms,
             t.times.size(), num("ms_min"), t.last.loss);
  fmt::print("  throughput    {:9.1f} tokens/s\n", num("tokens_per_s"));
  if (!b.host) {
    fmt::print("  host waits    {:9.1f} per step (uploads, downloads, syncs, norms)\n",
               t.host_waits);
  }
  if (L.tp > 1) {
    fmt::print("  tp collectives {:8.1f}% of the step (rank 0, from call to completion)\n",
               100.0 * num("comm_share"));
  }
  if (L.pp > 1) {
    fmt::print(
        "  bubble        {:9.3f} measured (waiting / busy, all ranks); {:.3f} simulated "
        "(stages priced by FLOPs, B = 2F, free messages)\n",
        num("bubble_measured"), num("bubble_simulated"));
  }
  if (L.dp > 1) {
    fmt::print(
        "  dp reductions {:9.1f} ms exposed per step of {:.1f} ms alone -> {:.0f}% hidden under "
        "backward (rank 0)\n",
        num("dp_reduction_exposed_ms"), num("dp_reduction_alone_ms"),
        100.0 * num("dp_reduction_hidden"));
  }
  fmt::print("  model FLOP/s  {:9.2f} {}  (72BTLC^2(1+T/6C+V/12LC) = {:.3g} FLOP/step)\n",
             achieved / unit, b.host ? "GFLOP/s" : "TFLOP/s", num("model_flops_per_step"));
  if (o.peak_tflops > 0) {
    fmt::print("  spec peak     {:9.1f} TFLOP/s  -> MFU {:.1f}%\n", o.peak_tflops,
               100.0 * num("mfu_spec"));
  }
  if (b.ceiling) {
    fmt::print(
        "  GEMM ceiling  {:9.1f} GFLOP/s  (this step's GEMM shapes, measured between the steps; "
        "max/min {:.2f})  -> {:.1f}% (median of each step over the ceilings around it)\n",
        num("gemm_ceiling_gflops"), num("gemm_ceiling_spread"),
        100.0 * num("ratio_to_gemm_ceiling"));
  } else {
    fmt::print(
        "  GEMM ceiling  {:9.2f} TFLOP/s  (this model's forward GEMM shapes, measured now) -> "
        "{:.1f}%\n",
        num("gemm_ceiling_tflops"), 100.0 * num("ratio_to_gemm_ceiling"));
  }
  if (b.bf16) {
    fmt::print(
        "  bf16 ceiling  {:9.1f} GFLOP/s  (the same shapes through sgemm_bf16)     -> {:.1f}%\n",
        num("gemm_ceiling_bf16_gflops"), 100.0 * achieved / num("gemm_ceiling_bf16_gflops") / 1e9);
  }
  const model::MemoryEstimate p = b.engine->runner().predicted_memory();
  fmt::print(
      "  memory        predicted {:.1f} MiB = params {:.1f} + grads {:.1f} + optimizer {:.1f} + "
      "activations {:.1f} + workspace {:.1f} + runtime {:.1f}\n",
      mib(p.total()), mib(p.params), mib(p.grads), mib(p.optimizer), mib(p.activations),
      mib(p.workspace), mib(p.runtime));
  fmt::print(
      "                {} {:.1f} MiB -> {:.1f}% of predicted{}\n",
      b.host ? "measured  (peak resident above the start)" : "allocated", num("mem_measured_mib"),
      100.0 * num("mem_measured_over_predicted"),
      b.world_size > 1 ? " (each rank against its own prediction; the largest of each shown)" : "");
  if (t.ops.empty()) return;
  double sum = 0;
  for (const auto& op : t.ops) sum += op.seconds;
  fmt::print(
      "  profile       one step with each op timed alone: {:.2f} ms, {:.2f} ms of it in ops "
      "(the rest: host work between them)\n",
      t.profiled_seconds * 1e3, sum * 1e3);
  for (const auto& op : t.ops) {
    fmt::print("    {:>9.3f} ms {:5.1f}%  x{:<4} {}\n", op.seconds * 1e3,
               100.0 * op.seconds / t.profiled_seconds, op.calls, op.op);
  }
}

void run_bench_step(const BenchOptions& o) {
  const JobWorld processes;
  Bench b;
  build_bench(b, o, processes.world());
  Timed t = run_steps(b, o);
  const nlohmann::json j = job_figures(b, o, t);
  if (b.world != nullptr && b.world->rank() != 0) return;
  if (o.json) {
    fmt::print("{}\n", j.dump());
  } else {
    print_report(b, o, j, t);
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* step = bench->add_subcommand("step", "Time training steps of a model on random tokens");
  auto o = std::make_shared<BenchOptions>();
  step->add_option("--model", o->model_path, "model config (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  step->add_option("--batch", o->batch, "sequences per step (B)")->check(kPositive);
  step->add_option("--seq", o->seq, "sequence length (T)")->check(kPositive);
  step->add_option("--steps", o->steps, "timed steps")->check(kPositive);
  step->add_option("--warmup", o->warmup, "untimed steps first")->check(kNonNegative);
  step->add_option("--threads", o->threads, "kernel threads (default: all cores)");
  step->add_option("--recompute", o->recompute, "activation recomputation: none|selective|full");
  step->add_option("--precision", o->precision,
                   "matmul precision of the linear layers: f32|bf16 (bf16 inputs, fp32 "
                   "accumulation; weights and optimizer state stay fp32)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  step->add_flag("--json", o->json, "print one JSON line instead of the report");
  step->add_option("--tp", o->tp,
                   "tensor-parallel size; run under mpirun -n TP*PP*DP (each rank gets "
                   "cores/ranks threads unless --threads says otherwise)")
      ->check(kPositive);
  step->add_option("--pp", o->pp, "pipeline-parallel size")->check(kPositive);
  step->add_option("--zero", o->zero, "ZeRO stage over the dp replicas: 0, 1, 2 or 3")
      ->check(CLI::Range(0, 3));
  step->add_option("--dp", o->dp, "data-parallel replicas (each runs the microbatches)")
      ->check(kPositive);
  step->add_option("--vp", o->vp, "model chunks per pipeline rank")->check(kPositive);
  step->add_option("--schedule", o->schedule, "gpipe|1f1b|interleaved|zb-h1");
  step->add_option("--microbatches", o->microbatches, "microbatches of B sequences per step")
      ->check(kPositive);
  step->add_flag("--sequence-parallel", o->sequence_parallel,
                 "with --tp > 1, split the LayerNorm and residual regions along the sequence");
  step->add_option("--device", o->device, kDeviceHelp);
  step->add_option("--peak-tflops", o->peak_tflops,
                   "the spec peak (dense, in the precision the steps run in) for MFU against it, "
                   "e.g. 989.4 for an H100/H200 SXM in bf16 (configs/clusters/h200.toml)");
  step->add_flag("--profile", o->profile,
                 "with --device: one more step with every op timed alone (where the time goes)");
  step->callback([o] { run_bench_step(*o); });
}

}  // namespace weft::cli
