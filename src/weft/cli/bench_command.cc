// weft bench step: time training steps (forward, backward, AdamW) of a model on random tokens and
// report tokens/s, model FLOP/s against the GEMM ceiling measured in the same run, and predicted
// versus measured peak memory. --precision bf16 runs the linear layers' GEMMs with bf16 inputs
// (kernels.h, MatmulPrecision); the reported ceiling stays the fp32 one, with the bf16 ceiling on
// the same shapes next to it.
//
// --device cuda|host-bf16 times the GPU trainer instead (cli/bench_device.cc).
//
// Under `mpirun -n N ... --tp N [--sequence-parallel]` every rank runs the tensor-parallel step and
// rank 0 reports it, with the share of the step spent in the tp group's collectives (measured by
// the Recording communicator: from each call until its wait returned). Each rank measures the
// GEMM ceiling at its own thread count at the same moment; the job's ceiling is their sum.

#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "weft/cli/commands.h"
#include "weft/cli/device.h"
#include "weft/cli/job_world.h"
#include "weft/cli/launch_check.h"
#include "weft/cli/validators.h"
#include "weft/comm/mpi_communicator.h"
#include "weft/comm/recording_communicator.h"
#include "weft/core/clock.h"
#include "weft/core/memory_usage.h"
#include "weft/core/node.h"
#include "weft/core/rng.h"
#include "weft/kernels/kernels.h"
#include "weft/model/flops.h"
#include "weft/model/memory.h"
#include "weft/parallel/groups.h"
#include "weft/planner/memory_model.h"
#include "weft/runtime/gemm_ceiling.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/schedule/schedule.h"
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

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void run_bench_step(const BenchOptions& o) {
  auto recompute = model::parse_recompute(o.recompute);
  if (!recompute) {
    throw Error("--recompute must be none, selective or full, not '" + o.recompute + "'");
  }
  if (o.device != "cpu") {
    if (o.tp * o.pp * o.dp != 1) {
      throw Error(fmt::format(
          "--device {} times one process with the whole model (no --tp/--pp/--dp); pipelines "
          "and replicas on devices run under weft train",
          o.device));
    }
    run_bench_step_on_device({.model_path = o.model_path,
                              .device = o.device,
                              .batch = o.batch,
                              .seq = o.seq,
                              .steps = o.steps,
                              .warmup = o.warmup,
                              .microbatches = o.microbatches,
                              .recompute = *recompute,
                              .peak_tflops = o.peak_tflops,
                              .json = o.json,
                              .profile = o.profile});
    return;
  }
  const JobWorld processes;
  comm::Communicator* world = processes.world();
  const int world_size = world ? world->size() : 1;
  const int ranks = o.tp * o.pp * o.dp;
  if (ranks != world_size) {
    throw Error(
        fmt::format("--tp {} x --pp {} x --dp {} needs {} processes (mpirun -n {}); {} "
                    "started",
                    o.tp, o.pp, o.dp, ranks, ranks, world_size));
  }
  const bool leader = !world || world->rank() == 0;
  const parallel::Topology topo({.tp = o.tp, .pp = o.pp, .dp = o.dp});
  parallel::ProcessGroups groups;
  if (world_size > 1) groups = parallel::make_groups(*world, topo);
  const int threads =
      o.threads > 0
          ? o.threads
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world_size);
  kernels::set_num_threads(threads);
  const bool bf16 = o.precision == "bf16";
  kernels::set_matmul_precision(bf16 ? kernels::MatmulPrecision::BF16
                                     : kernels::MatmulPrecision::F32);
  auto cfg = model::load_gpt_config(o.model_path).value_or_throw("invalid model config");
  const int B = o.batch, T = o.seq, m = o.microbatches;
  model::validate_for_run(cfg, T).throw_if_error("invalid run of '" + cfg.name + "'");
  const schedule::Kind kind = schedule::parse_kind(o.schedule).value_or_throw("--schedule");
  const schedule::Schedule sched =
      runtime::runner_schedule(cfg, kind, o.pp, o.vp, m).value_or_throw("invalid pipeline");

  const bool sp = o.sequence_parallel && o.tp > 1;
  // What this rank allocates, predicted by the planner's model of weft's trainer.
  planner::Job job;
  job.model = cfg;
  job.seq_len = T;
  job.global_batch = m * B * o.dp;
  job.world = world_size;
  job.precision = planner::Precision::FP32;
  layout::Layout pc;
  pc.tp = o.tp;
  pc.pp = o.pp;
  pc.dp = o.dp;
  pc.vp = o.vp;
  pc.micro_batch = B;
  pc.schedule = kind;
  pc.recompute = *recompute;
  pc.sequence_parallel = sp;
  pc.zero = o.zero;
  check_host_memory({job, pc}, local_processes(world_size), "this benchmark", world)
      .throw_if_error("cannot run");
  // The GEMM ceiling's buffers come before the memory baseline: the model's memory is what follows.
  const auto shapes = model::training_gemm_shapes(cfg, B, T);
  runtime::GemmCeilingMeter meter(shapes);
  const int64_t rss_before = current_resident_bytes();
  const model::MemoryEstimate predicted =
      planner::weft_rank_memory(job, pc, topo.coord(world ? world->rank() : 0).pp, threads,
                                kernels::host_runtime_bytes());  // as the trainer prices it
  runtime::PipelineOptions po =
      runtime::pipeline_options(groups, {.B = B,
                                         .T = T,
                                         .recompute = *recompute,
                                         .pp_rank = topo.coord(world ? world->rank() : 0).pp,
                                         .tp = {o.tp, sp},
                                         .zero = {o.zero, o.dp}});
  // The tp group records its collectives' time: the communication share of the step.
  auto recorder = std::make_shared<comm::CommRecorder>();
  std::unique_ptr<comm::RecordingCommunicator> tp;
  if (groups.tp) tp = std::make_unique<comm::RecordingCommunicator>(std::move(groups.tp), recorder);
  po.tp = tp.get();
  runtime::PipelineRunner runner(cfg, sched, po);
  runner.init(1234);

  const std::vector<int32_t> tokens = bench_tokens(cfg.vocab_size, size_t(m) * B * T + 1);
  // The ceiling is measured between the timed steps (ceiling, step, ceiling, ..., step, ceiling),
  // and each step is compared with the mean of the two ceilings around it: on a shared machine the
  // load drifts, and a ceiling measured once, at another moment, compared two different machines
  // (a loaded step read 38% of an idle ceiling; an idle step 160% of a loaded one). The ranks'
  // rates add up: sum their FLOPs, keep the slowest rank's time.
  std::vector<runtime::GemmCeiling> ceilings;
  int64_t peak = 0;  // the steps' peak resident memory, the ceilings' bursts set aside
  auto measure_ceiling = [&] {
    if (world) world->barrier();
    peak = std::max(peak, peak_resident_bytes());
    runtime::GemmCeiling c = meter.measure(2);
    forget_burst();
    if (world) {
      world->all_reduce(&c.flops, 1);
      world->all_reduce(&c.seconds, 1, comm::ReduceOp::Max);
    }
    ceilings.push_back(c);
  };
  std::vector<double> times;
  runtime::StepStats last;
  double comm_seconds = 0, waiting = 0, busy = 0;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    if (world) world->barrier();  // every rank starts the step together
    recorder->clear();
    if (s == o.warmup) {
      for (optim::DistributedOptimizer* opt : runner.optimizers()) opt->reset_reduction_wait();
    }
    if (s >= o.warmup) {
      measure_ceiling();
      if (world) world->barrier();
    }
    auto t0 = std::chrono::steady_clock::now();
    last = runner.step(tokens.data(), tokens.data() + 1, 3e-4f, 1.0);
    double dt = seconds_since(t0);
    if (s >= o.warmup) {
      times.push_back(dt);
      comm_seconds += recorder->seconds();
      waiting += runner.last_timing().waiting;
      busy += runner.last_timing().seconds - runner.last_timing().waiting;
    }
  }
  measure_ceiling();
  // The slowest rank's time is the step's; the bubble is Narayanan et al.'s: total waiting over
  // total busy time, summed over the ranks.
  std::vector<double> waits(world_size, waiting), busies(world_size, busy);
  if (world) {
    world->all_reduce(times.data(), static_cast<int64_t>(times.size()), comm::ReduceOp::Max);
    world->all_gather(waits.data(), &waiting, 1);
    world->all_gather(busies.data(), &busy, 1);
  }
  const double total_time = std::accumulate(times.begin(), times.end(), 0.0);
  const double comm_share = comm_seconds / total_time;
  const double bubble = std::accumulate(waits.begin(), waits.end(), 0.0) /
                        std::accumulate(busies.begin(), busies.end(), 0.0);
  // The same schedule simulated with each stage's forward priced by its FLOPs per token (PTD-P
  // appendix: 24h^2 + 4sh per layer, 2hV for the LM head), backward = 2 x forward, free messages.
  schedule::Costs costs = schedule::uniform_costs(sched.shape, {});
  for (int st = 0; st < sched.shape.num_stages(); ++st) {
    const model::StageSpec spec = model::pipeline_stage(cfg, st, sched.shape.num_stages());
    const double h = cfg.n_embd;
    const double f = (spec.end_layer(cfg) - spec.first_layer) * (24 * h * h + 4.0 * T * h) +
                     (spec.head ? 2 * h * cfg.padded_vocab() : 0.0);
    costs.stages[st] = {f, 2 * f, f, f};
  }
  const double bubble_simulated = schedule::simulate(sched, costs).bubble_fraction;
  // Per rank: measured peak RSS above the start, over its prediction; the job's worst rank.
  int64_t measured = std::max(peak, peak_resident_bytes()) - rss_before,
          predicted_total = predicted.total();
  // Data parallelism: the gradient reductions' time left exposed (waited for) per step, against
  // the same reductions run alone: the rest was hidden under backward. Rank 0's view.
  double exposed = 0, alone = 0;
  if (o.dp > 1) {
    for (optim::DistributedOptimizer* opt : runner.optimizers()) {
      exposed += opt->reduction_wait_seconds() / o.steps;
    }
    std::vector<double> runs;
    for (int k = 0; k < 3; ++k) {  // the median of three
      double a = 0;
      for (optim::DistributedOptimizer* opt : runner.optimizers()) {
        a += opt->time_reductions_alone(m);
      }
      runs.push_back(a);
    }
    std::sort(runs.begin(), runs.end());
    alone = runs[1];
  }
  const double hidden = alone > 0 ? std::clamp(1.0 - exposed / alone, 0.0, 1.0) : 0.0;
  double mem_ratio = static_cast<double>(measured) / predicted_total;
  if (world) {
    world->all_reduce(&measured, 1, comm::ReduceOp::Max);
    world->all_reduce(&predicted_total, 1, comm::ReduceOp::Max);
    world->all_reduce(&mem_ratio, 1, comm::ReduceOp::Max);
  }
  const double flops = model::model_flops_per_step(cfg, double(B) * m * o.dp, T);
  // Step i against ceilings i and i + 1 (the slowest rank's step time: `times` is reduced above).
  std::vector<double> pair_ratios, ceiling_rates;
  for (size_t i = 0; i < times.size(); ++i) {
    const double around = 0.5 * (ceilings[i].rate() + ceilings[i + 1].rate());
    pair_ratios.push_back(flops / times[i] / around);
  }
  for (const auto& c : ceilings) ceiling_rates.push_back(c.rate());
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double ratio_to_ceiling = median(pair_ratios), ceiling_rate = median(ceiling_rates);
  const double ceiling_spread = *std::max_element(ceiling_rates.begin(), ceiling_rates.end()) /
                                *std::min_element(ceiling_rates.begin(), ceiling_rates.end());
  std::sort(times.begin(), times.end());
  const double step_s = times[times.size() / 2];
  const double ceiling_bf16 = bf16 ? meter.measure(5, kernels::MatmulPrecision::BF16).rate() : 0.0;
  kernels::set_matmul_precision(kernels::MatmulPrecision::F32);
  const double achieved = flops / step_s;
  const int64_t tokens_per_step = int64_t{m} * B * T * o.dp;

  nlohmann::json j = {
      {"name", "weft"},
      {"model", cfg.name},
      {"params", model::gpt_param_layout(cfg).count()},
      {"B", B},
      {"T", T},
      {"microbatches", m},
      {"threads", threads},
      {"ranks", world_size},
      {"tp", o.tp},
      {"pp", o.pp},
      {"dp", o.dp},
      {"vp", o.vp},
      {"schedule", o.schedule},
      {"sequence_parallel", sp},
      {"zero", o.zero},
      {"dp_reduction_exposed_ms", exposed * 1e3},
      {"dp_reduction_alone_ms", alone * 1e3},
      {"dp_reduction_hidden", hidden},
      {"comm_share", comm_share},
      {"bubble_measured", bubble},
      {"bubble_simulated", bubble_simulated},
      {"waiting_share_per_rank",
       [&] {
         std::vector<double> share(world_size);
         for (int r = 0; r < world_size; ++r) share[r] = waits[r] / (waits[r] + busies[r]);
         return share;
       }()},
      {"recompute", o.recompute},
      {"precision", o.precision},
      {"ms_median", step_s * 1e3},
      {"ms_min", times.front() * 1e3},
      {"tokens_per_s", tokens_per_step / step_s},
      {"model_gflops", achieved / 1e9},
      {"gemm_ceiling_gflops", ceiling_rate / 1e9},
      {"ratio_to_gemm_ceiling", ratio_to_ceiling},
      {"gemm_ceiling_spread", ceiling_spread},
      {"gemm_ceiling_bf16_gflops", bf16 ? nlohmann::json(ceiling_bf16 / 1e9) : nlohmann::json()},
      {"loss", last.loss},
      {"mem_predicted_mib", mib(predicted_total)},
      {"mem_measured_mib", mib(measured)},
      {"mem_measured_over_predicted", mem_ratio},
  };
  if (!leader) return;
  if (o.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  std::string layout;
  if (o.tp > 1) layout += fmt::format(", tp={}{}", o.tp, sp ? " (sequence parallel)" : "");
  if (o.pp > 1) layout += fmt::format(", pp={} vp={} {}", o.pp, o.vp, o.schedule);
  if (o.dp > 1) layout += fmt::format(", dp={} zero={}", o.dp, o.zero);
  fmt::print(
      "weft bench step: {} ({} parameters), B={} T={} x {} microbatch(es), {} threads x {} "
      "rank(s){}, recompute={}, precision={}\n",
      cfg.name, model::gpt_param_layout(cfg).count(), B, T, m, threads, world_size, layout,
      o.recompute, o.precision);
  fmt::print("  step          {:9.1f} ms (median of {}; min {:.1f} ms)   loss {:.4f}\n",
             step_s * 1e3, times.size(), times.front() * 1e3, last.loss);
  fmt::print("  throughput    {:9.1f} tokens/s\n", tokens_per_step / step_s);
  if (o.tp > 1) {
    fmt::print("  tp collectives {:8.1f}% of the step (rank 0, from call to completion)\n",
               100.0 * comm_share);
  }
  if (o.pp > 1) {
    fmt::print(
        "  bubble        {:9.3f} measured (waiting / busy, all ranks); {:.3f} simulated "
        "(stages priced by FLOPs, B = 2F, free messages)\n",
        bubble, bubble_simulated);
  }
  if (o.dp > 1) {
    fmt::print(
        "  dp reductions {:9.1f} ms exposed per step of {:.1f} ms alone -> {:.0f}% hidden under "
        "backward (rank 0)\n",
        exposed * 1e3, alone * 1e3, 100.0 * hidden);
  }
  fmt::print("  model FLOP/s  {:9.1f} GFLOP/s  (72BTLC^2(1+T/6C+V/12LC) = {:.3g} FLOP/step)\n",
             achieved / 1e9, flops);
  fmt::print(
      "  GEMM ceiling  {:9.1f} GFLOP/s  (this step's GEMM shapes, measured between the steps; "
      "max/min {:.2f})  -> {:.1f}% (median of each step over the ceilings around it)\n",
      ceiling_rate / 1e9, ceiling_spread, 100.0 * ratio_to_ceiling);
  if (bf16) {
    fmt::print(
        "  bf16 ceiling  {:9.1f} GFLOP/s  (the same shapes through sgemm_bf16)     -> {:.1f}%\n",
        ceiling_bf16 / 1e9, 100.0 * achieved / ceiling_bf16);
  }
  fmt::print(
      "  memory        predicted {:.1f} MiB = params {:.1f} + grads {:.1f} + optimizer {:.1f} + "
      "activations {:.1f} + workspace {:.1f} + runtime {:.1f}\n",
      mib(predicted.total()), mib(predicted.params), mib(predicted.grads), mib(predicted.optimizer),
      mib(predicted.activations), mib(predicted.workspace), mib(predicted.runtime));
  fmt::print(
      "                measured  {:.1f} MiB (peak RSS above the {:.1f} MiB before the model)"
      " -> {:.1f}% of predicted{}\n",
      mib(measured), mib(rss_before), 100.0 * mem_ratio,
      world_size > 1 ? " (each rank against its own prediction; the largest of each shown)" : "");
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
                   "with --device: the device's spec peak (dense bf16) for MFU, e.g. 989.4 for an "
                   "H100/H200 SXM (configs/clusters/h200.toml)");
  step->add_flag("--profile", o->profile,
                 "with --device: one more step with every op timed alone (where the time goes)");
  step->callback([o] { run_bench_step(*o); });
}

}  // namespace weft::cli
