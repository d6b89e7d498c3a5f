// weft calibrate: measure this machine and write a cluster preset (configs/clusters/*.toml) the
// planner reads: GEMM rates by shape (fitted to the planner's GEMM model), the memory bandwidth
// of a streaming copy and of the optimizer step, and, when started by mpirun with two or more
// ranks, the alpha and beta of all-reduce and point-to-point messages between ranks (least squares
// over several sizes). Without mpirun (or with --no-mpi) the link constants keep the preset
// defaults, and it says so. First of all, before anything else touches oneDNN, it measures what a
// training process holds beyond its model's buffers (the preset's memory.runtime_mib), with a few
// steps of a small GPT.

#include <fmt/chrono.h>
#include <fmt/core.h>
#include <malloc.h>
#include <omp.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "weft/cli/commands.h"
#include "weft/cli/job_world.h"
#include "weft/comm/mpi_communicator.h"
#include "weft/core/clock.h"
#include "weft/core/memory_usage.h"
#include "weft/core/pending_file.h"
#include "weft/core/status.h"
#include "weft/core/weft_files.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/kernels.h"
#include "weft/model/gemm_shapes.h"
#include "weft/optim/unit_pool.h"
#include "weft/planner/cost_model.h"
#include "weft/planner/gemm_fit.h"
#include "weft/planner/hardware.h"
#include "weft/runtime/gemm_ceiling.h"
#include "weft/runtime/pipeline_runner.h"

namespace weft::cli {
namespace {

struct CalibrateOptions {
  std::string output = "configs/clusters/this-machine.toml";
  int threads = 0;  // per process; 0: every core / ranks per node
  int ranks_per_node = 1;
  bool no_mpi = false;
  bool quick = false;
};

using Measured = planner::GemmSample;

// GEMM rates over shapes that span the model's (square, tall, skinny, short K).
std::vector<Measured> measure_gemms(bool quick) {
  std::vector<model::GemmShape> shapes;
  const std::vector<std::array<int64_t, 3>> mnk =
      quick ? std::vector<std::array<int64_t, 3>>{{256, 256, 256},
                                                  {1024, 1024, 1024},
                                                  {2048, 768, 768},
                                                  {1024, 1024, 64}}
            : std::vector<std::array<int64_t, 3>>{
                  {128, 128, 128},    {256, 256, 256},  {512, 512, 512},   {1024, 1024, 1024},
                  {1536, 1536, 1536}, {2048, 768, 768}, {2048, 3072, 768}, {2048, 768, 3072},
                  {4096, 256, 1024},  {1024, 1024, 64}, {1024, 64, 1024},  {64, 1024, 1024},
                  {8192, 512, 128},   {2048, 2048, 256}};
  for (const auto& [M, N, K] : mnk) {
    shapes.push_back({.name = fmt::format("{}x{}x{}", M, N, K), .M = M, .N = N, .K = K});
  }
  const runtime::GemmCeiling ceiling = runtime::GemmCeilingMeter(shapes).measure(quick ? 3 : 5);
  std::vector<Measured> out;
  for (const auto& t : ceiling.timings) out.push_back({t.shape.M, t.shape.N, t.shape.K, t.seconds});
  return out;
}

// Fits the GEMM model: the best measured rate is the peak (the source says so); tile size,
// k_half and efficiency by least squares on log time over a small grid.
void fit_gemm(planner::Cluster& c, const std::vector<Measured>& m, int units) {
  double best_rate = 0;
  for (const auto& x : m) best_rate = std::max(best_rate, 2.0 * x.M * x.N * x.K / x.seconds);
  c.peak_fp32 = best_rate;
  c.gemm.compute_units = units;
  c.gemm.min_time = 0;
  double best_error = 1e300;
  for (int tile : {8, 16, 32, 64, 128}) {
    for (double k_half : {0.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0}) {
      planner::Cluster trial = c;
      trial.gemm.tile_m = trial.gemm.tile_n = tile;
      trial.gemm.k_half = k_half;
      trial.gemm.efficiency = 1;
      const auto log_ratio = [&](const Measured& x) {  // log(measured / model)
        return std::log(x.seconds / planner::gemm_time(trial, best_rate, x.M, x.N, x.K));
      };
      // log(measured) = log(model at efficiency 1) - log(efficiency): the mean gives efficiency.
      double sum = 0;
      for (const auto& x : m) sum += log_ratio(x);
      trial.gemm.efficiency = std::clamp(std::exp(-sum / m.size()), 0.05, 1.0);
      double error = 0;
      for (const auto& x : m) error += log_ratio(x) * log_ratio(x);
      if (error < best_error) {
        best_error = error;
        c.gemm = trial.gemm;
      }
    }
  }
}

// A streaming copy over buffers much larger than the caches, every thread on its own slice:
// bytes read + written per second.
double measure_copy_bandwidth(bool quick) {
  const size_t n = (quick ? 64u : 256u) << 20;
  std::vector<char> a(n, 1), b(n, 0);
  double best = 0;
  for (int rep = 0; rep < (quick ? 3 : 7); ++rep) {
    const auto t0 = SteadyClock::now();
#pragma omp parallel
    {
      const size_t threads = omp_get_num_threads(), id = omp_get_thread_num();
      const size_t chunk = n / threads, begin = id * chunk,
                   end = id + 1 == threads ? n : begin + chunk;
      std::memcpy(b.data() + begin, a.data() + begin, end - begin);
    }
    best = std::max(best, 2.0 * n / seconds_since(t0));
    std::swap(a, b);
  }
  return best;
}

// The optimizer step's rate: kernels::cpu::adamw_update (the trainer's host AdamW) over fp32
// buffers much larger than the caches, in bytes per second as the planner counts them (28 per
// parameter: parameter, gradient and both moments read, all but the gradient written).
double measure_optimizer_bandwidth(bool quick) {
  const int64_t n = int64_t{quick ? 4 : 16} << 20;
  std::vector<float> p(n, 0.5f), g(n, 1e-3f), m(n, 0.f), v(n, 0.f);
  double best = 0;
  for (int t = 1; t <= (quick ? 3 : 7); ++t) {
    const auto t0 = SteadyClock::now();
    kernels::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f,
                               0.1f, t);
    if (t > 1) best = std::max(best, 28.0 * n / seconds_since(t0));  // the first touches pages
  }
  return best;
}

// Least-squares line y = alpha + beta * x, weighted by 1/y^2 (relative error), so the small
// messages that fix alpha count as much as the large ones that fix beta.
std::pair<double, double> fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = 1 / (y[i] * y[i]);
    sw += w;
    sx += w * x[i];
    sy += w * y[i];
    sxx += w * x[i] * x[i];
    sxy += w * x[i] * y[i];
  }
  const double beta = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
  return {std::max(0.0, (sy - beta * sx) / sw), beta};
}

// All-reduce, reduce-scatter, all-gather and ping-pong over MPI_COMM_WORLD at several sizes; fits
// the ring models t = 2(p-1) alpha + 2(p-1)/p * S / bandwidth (all-reduce), (p-1) alpha +
// (p-1)/p * S / bandwidth (reduce-scatter, all-gather: only their bandwidth is kept, the latency
// is the all-reduce's) and t = alpha + S / bandwidth (ping-pong). Each collective is the one the
// trainer calls (comm/mpi_communicator.cc), so each is priced as it runs: ZeRO's reduce-scatters
// and gathers move their bytes at other rates than the all-reduce (planner::Link).
struct LinkFit {
  planner::Link allreduce, p2p;
};
LinkFit measure_links(comm::Communicator& world, bool quick) {
  const int p = world.size();
  std::vector<double> xs, ys, px, py, cx, rsy, agy;
  const std::vector<int64_t> sizes =
      quick ? std::vector<int64_t>{1 << 10, 1 << 16, 1 << 20}
            : std::vector<int64_t>{1 << 8, 1 << 12, 1 << 16, 1 << 18, 1 << 20, 1 << 22};
  const std::unique_ptr<kernels::Backend> backend = kernels::make_host_backend(Precision::FP32);
  for (int64_t n : sizes) {
    std::vector<float> buf(n, 1.0f);
    const int reps = n >= (1 << 20) ? 5 : 50;
    auto timed = [&](auto&& op) {  // seconds per call, after one untimed call
      op();
      world.barrier();
      const auto start = SteadyClock::now();
      for (int i = 0; i < reps; ++i) op();
      return seconds_since(start) / reps;
    };
    xs.push_back(2.0 * (p - 1) / p * n * 4);
    ys.push_back(timed([&] { world.all_reduce(buf.data(), n); }));
    // Reduce-scatter of a buffer into 1/p of it, and all-gather of 1/p into a buffer, on the
    // memory ZeRO runs them on: the host backend's (optim/unit_pool.h).
    const int64_t part = n / p;
    optim::UnitPool pool(*backend);
    auto* full = static_cast<float*>(pool.acquire(part * p * 4, /*zeroed=*/true));
    auto* shard = static_cast<float*>(pool.acquire(part * 4, /*zeroed=*/true));
    cx.push_back(static_cast<double>(p - 1) / p * part * p * 4);
    rsy.push_back(timed([&] { world.reduce_scatter(shard, full, part); }));
    agy.push_back(timed([&] { world.all_gather(full, shard, part); }));
    // Ping-pong between ranks 0 and 1: half the round trip.
    world.barrier();
    const auto t0 = SteadyClock::now();
    for (int i = 0; i < reps; ++i) {
      if (world.rank() == 0) {
        world.send(buf.data(), n, 1);
        world.recv(buf.data(), n, 1);
      } else if (world.rank() == 1) {
        world.recv(buf.data(), n, 0);
        world.send(buf.data(), n, 0);
      }
    }
    px.push_back(n * 4.0);
    py.push_back(seconds_since(t0) / reps / 2);
  }
  const auto bandwidth = [](double beta) { return beta > 0 ? 1 / beta : 0; };  // of s per byte
  const auto [a, b] = fit_line(xs, ys);
  const auto [pa, pb] = fit_line(px, py);
  return {.allreduce = {.bandwidth = bandwidth(b),
                        .latency = a / (2.0 * (p - 1)),
                        .reduce_scatter_bandwidth = bandwidth(fit_line(cx, rsy).second),
                        .all_gather_bandwidth = bandwidth(fit_line(cx, agy).second)},
          .p2p = {.bandwidth = bandwidth(pb), .latency = pa}};
}

// What one training process holds beyond its model's buffers (Cluster::runtime_bytes, the term
// model::estimate_rank_memory adds to every rank): a serial GPT (L=2, C=256, 4 heads, V=4096,
// T=64, B=4: the scale of `weft tune`'s trials) is built and stepped in this process, as a trial
// or `weft train` does; its peak resident memory above what the process held before (measured as
// they measure it) less everything else the estimate counts for it is the runtime: the pages of
// code the step touches, oneDNN's JIT-generated kernels, the libraries' heap temporaries (oneDNN's
// operand packing, MPI's), glibc's arena slack. It must run before anything else in the process
// touches oneDNN, or those pages would be in the baseline. Every rank measures; the largest
// counts (the busiest rank is the one a prediction must cover).
struct RuntimeMeasure {
  int64_t runtime_bytes = 0;
  int64_t measured = 0;  // the step's peak above the baseline
};
RuntimeMeasure measure_runtime_bytes(comm::Communicator* world) {
  model::GptConfig cfg;
  cfg.name = "calibrate-runtime";
  cfg.n_layer = 2;
  cfg.n_embd = 256;
  cfg.n_head = 4;
  cfg.vocab_size = 4096;
  cfg.max_seq_len = 64;
  constexpr int kB = 4, kT = 64, kSteps = 4;
  const int64_t baseline = current_resident_bytes();
  reset_peak_resident();
  double both[2] = {0, 0};  // this rank's runtime_bytes and measured, then the largest of each
  {
    runtime::PipelineRunner runner(cfg,
                                   runtime::runner_schedule(cfg, schedule::Kind::OneFOneB, 1, 1, 1)
                                       .value_or_throw("calibrate: the runtime probe's schedule"),
                                   {.shape = {.B = kB, .T = kT}});
    runner.init(1);
    std::vector<int32_t> tokens(kB * kT + 1);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 2654435761u) % cfg.vocab_size);
    }
    for (int s = 0; s < kSteps; ++s) runner.step(tokens.data(), tokens.data() + 1, 3e-4f, 1.0);
    const int64_t measured = peak_resident_bytes() - baseline;
    // What the estimate counts besides the runtime (it prices that at kDefaultRuntimeBytes).
    const int64_t model_bytes = runner.predicted_memory().total() - model::kDefaultRuntimeBytes;
    both[0] = static_cast<double>(std::max<int64_t>(0, measured - model_bytes));
    both[1] = static_cast<double>(measured);
  }
  malloc_trim(0);  // the probe's buffers back before the GEMM measurements
  if (world != nullptr && world->size() > 1) world->all_reduce(both, 2, comm::ReduceOp::Max);
  return {static_cast<int64_t>(both[0]), static_cast<int64_t>(both[1])};
}

void run_calibrate(const CalibrateOptions& o) {
  using namespace planner;
  const bool use_mpi = !o.no_mpi && comm::launched_by_mpi();
  const JobWorld processes(use_mpi);
  comm::Communicator* world = processes.world();
  const int rank = world ? world->rank() : 0;
  const int ranks = world ? world->size() : 1;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const int per_node = std::max(o.ranks_per_node, ranks);
  const int threads = o.threads > 0 ? o.threads : std::max<int>(1, cores / per_node);
  kernels::set_num_threads(threads);
  omp_set_num_threads(threads);

  Cluster c;
  c.name = "this-machine";
  c.device = fmt::format("CPU process ({} threads)", threads);
  c.description =
      fmt::format("{} processes of {} threads on one machine ({} cores)", per_node, threads, cores);
  c.devices_per_node = per_node;
  c.max_nodes = 1;
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  c.memory_bytes = ram / per_node;
  c.reserved_bytes = 0.1 * c.memory_bytes;  // the OS, MPI, the page cache
  std::string notes;
  if (rank == 0) fmt::print("measuring a training process's runtime memory ...\n");
  const RuntimeMeasure runtime_memory = measure_runtime_bytes(world);
  c.runtime_bytes = runtime_memory.runtime_bytes;
  notes += fmt::format(
      "# memory.runtime_mib: a serial GPT's (L=2, C=256, V=4096, B=4, T=64) peak resident memory\n"
      "# above the process's start, {:.2f} MiB on the busiest rank, less its buffers as\n"
      "# model::estimate_rank_memory counts them.\n",
      static_cast<double>(runtime_memory.measured) / (1 << 20));
  if (rank == 0) fmt::print("measuring GEMM rates ({} threads) ...\n", threads);
  const std::vector<Measured> gemms = measure_gemms(o.quick);
  fit_gemm(c, gemms, threads);
  // The factors a later refit adds hold at the speed of the minute it measures; this preset's
  // GEMM model is this minute's (near 1 by the fit, not exactly).
  c.gemm_speed = planner::gemm_speed(c.gemm, c.peak_fp32, gemms);
  c.peak_bf16 = 0;
  if (rank == 0) fmt::print("measuring memory bandwidth ...\n");
  c.memory_bandwidth = measure_copy_bandwidth(o.quick);
  c.memory_efficiency = 1;
  c.optimizer_bandwidth = measure_optimizer_bandwidth(o.quick);
  // Links default to shared-memory-ish figures until measured.
  c.node = {.bandwidth = c.memory_bandwidth / 4, .latency = 2e-6};
  c.network = c.node;
  if (world && ranks >= 2) {
    if (rank == 0) {
      fmt::print(
          "measuring all-reduce, reduce-scatter, all-gather and point-to-point over {} "
          "ranks ...\n",
          ranks);
    }
    const LinkFit f = measure_links(*world, o.quick);
    if (f.allreduce.bandwidth > 0) c.node = f.allreduce;
    if (f.p2p.bandwidth > 0) c.network = f.p2p;
    notes += fmt::format(
        "# link.node: all-reduce over {} MPI ranks, fitted 2(p-1)alpha + 2(p-1)/p S/bandwidth;\n"
        "# its reduce_scatter/all_gather_bandwidth_gbps: those collectives, fitted (p-1)alpha +\n"
        "# (p-1)/p S/bandwidth (ZeRO's; each implementation copies at its own rate);\n"
        "# link.network: ping-pong between ranks 0 and 1, fitted alpha + S/bandwidth (one\n"
        "# machine: there is no network; pipeline messages cross the same shared memory).\n",
        ranks);
  } else {
    notes += fmt::format(
        "# link.*: NOT measured ({}): a quarter of the copy bandwidth and 2 us are placeholders.\n"
        "# Run `mpirun -n 2 weft calibrate` to measure them.\n",
        o.no_mpi ? "--no-mpi" : "not started by mpirun");
  }
  if (rank != 0) return;
  std::string header = fmt::format(
      "# This machine, measured by `weft calibrate` on {:%Y-%m-%d} (docs/planner.md §2).\n"
      "# peak_tflops.fp32: the best rate of the measured GEMMs (sgemm through oneDNN, {} "
      "threads),\n"
      "# not a spec sheet's figure; gemm.*: the GEMM model fitted to {} shapes by least squares\n"
      "# on log time. memory.bandwidth_gbps: a streaming copy (bytes read + written per second);\n"
      "# memory.optimizer_bandwidth_gbps: AdamW over fp32 buffers, 28 bytes per parameter.\n"
      "{}# GEMMs measured (M x N x K: GFLOP/s):",
      fmt::gmtime(std::time(nullptr)), threads, gemms.size(), notes);
  for (size_t i = 0; i < gemms.size(); ++i) {
    const Measured& x = gemms[i];
    header += fmt::format("{}{}x{}x{}: {:.1f}", i % 4 == 0 ? "\n#   " : ", ", x.M, x.N, x.K,
                          2.0 * x.M * x.N * x.K / x.seconds / 1e9);
  }
  header += "\n\n";
  const std::string text = to_toml(c, header);
  parse_cluster(text, o.output).value_or_throw("calibrate produced an invalid preset (a bug)");
  // A relative path whose folder is not under the working directory (the default,
  // configs/clusters/this-machine.toml, from elsewhere) goes to weft's own configs/.
  std::string target = o.output;
  const std::filesystem::path asked(o.output);
  if (asked.is_relative() && asked.has_parent_path() &&
      !std::filesystem::exists(asked.parent_path())) {
    target =
        (std::filesystem::path(find_weft_file(asked.parent_path().string())) / asked.filename())
            .string();
  }
  write_file_atomic(target, text).throw_if_error(fmt::format("cannot write '{}'", target));
  fmt::print("peak fp32 {:.1f} GFLOP/s (best GEMM), GEMM efficiency {:.2f}, tile {}, k_half {}\n",
             c.peak_fp32 / 1e9, c.gemm.efficiency, c.gemm.tile_m, c.gemm.k_half);
  fmt::print("memory {:.1f} GB/s (copy), {:.1f} GB/s (AdamW); runtime {:.2f} MiB per process\n",
             c.memory_bandwidth / 1e9, c.optimizer_bandwidth / 1e9,
             static_cast<double>(c.runtime_bytes) / (1 << 20));
  fmt::print("links  all-reduce {:.2f} GB/s alpha {:.1f} us; p2p {:.2f} GB/s alpha {:.1f} us{}\n",
             c.node.bandwidth / 1e9, c.node.latency * 1e6, c.network.bandwidth / 1e9,
             c.network.latency * 1e6, ranks >= 2 ? "" : " (placeholders: not measured)");
  fmt::print("wrote {}\n", target);
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Measure this machine (GEMM rates, memory bandwidth, MPI alpha-beta) into a "
      "cluster preset");
  auto o = std::make_shared<CalibrateOptions>();
  cmd->add_option("-o,--output", o->output, "the preset to write")->capture_default_str();
  cmd->add_option("--threads", o->threads, "kernel threads per process (0: cores / ranks)");
  cmd->add_option("--ranks-per-node", o->ranks_per_node,
                  "processes the runs will start on this machine (devices_per_node)")
      ->capture_default_str();
  cmd->add_flag("--no-mpi", o->no_mpi, "skip the MPI link measurement even under mpirun");
  cmd->add_flag("--quick", o->quick, "fewer shapes and sizes (for tests)");
  cmd->callback([o] { run_calibrate(*o); });
}

}  // namespace weft::cli
