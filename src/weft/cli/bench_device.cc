// weft bench step --device cuda|host-bf16 (cli/device.h): PipelineRunner steps, timed on the host
// around each step (a step ends with the loss and the gradient norm copied back, so the device is
// idle when the clock stops).

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <vector>

#include "weft/cli/device.h"
#include "weft/core/check.h"
#include "weft/core/clock.h"
#include "weft/core/rng.h"
#include "weft/kernels/profiling_backend.h"
#include "weft/model/flops.h"
#include "weft/runtime/pipeline_runner.h"

namespace weft::cli {

std::vector<int32_t> bench_tokens(int vocab, size_t n) {
  std::vector<int32_t> tokens(n);
  const uint64_t key = stream_key(7, "bench.tokens");
  for (size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>(uniform_at(key, i) * vocab) % vocab;
  }
  return tokens;
}

void run_bench_step_on_device(const DeviceBenchOptions& o) {
  auto cfg = model::load_gpt_config(o.model_path).value_or_throw("invalid model config");
  const int B = o.batch, T = o.seq, m = o.microbatches;
  model::validate_for_run(cfg, T).throw_if_error("invalid run of '" + cfg.name + "'");
  const auto backend =
      make_device(o.device, runtime::device_arena_bytes(cfg, B, T, m, o.recompute));
  WEFT_CHECK(backend != nullptr, "run_bench_step_on_device needs a device other than cpu");
  // The trainer runs on the profiling wrapper, which forwards untimed until --profile's step.
  kernels::ProfilingBackend profiler(*backend);
  runtime::PipelineRunner trainer(profiler, cfg, B, T, m, {}, o.recompute);
  trainer.init(1234);

  const std::vector<int32_t> tokens = bench_tokens(cfg.vocab_size, size_t(m) * B * T + 1);
  std::vector<double> times;
  runtime::StepStats last;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    if (s == o.warmup) profiler.reset_host_waits();
    const auto t0 = std::chrono::steady_clock::now();
    last = trainer.step(tokens.data(), tokens.data() + 1, 3e-4f, 1.0);
    const double dt = seconds_since(t0);
    if (s >= o.warmup) times.push_back(dt);
  }
  // Calls that made the host wait for the device, per timed step (docs/cuda.md).
  const double host_waits = static_cast<double>(profiler.host_waits()) / o.steps;
  std::sort(times.begin(), times.end());
  const double step_s = times[times.size() / 2];
  // One more step with every op timed on its own (each waits for the one before).
  std::vector<kernels::ProfilingBackend::OpTime> ops;
  double profiled_s = 0;
  if (o.profile) {
    profiler.set_enabled(true);
    const auto t0 = std::chrono::steady_clock::now();
    trainer.step(tokens.data(), tokens.data() + 1, 3e-4f, 1.0);
    profiled_s = seconds_since(t0);
    profiler.set_enabled(false);
    ops = profiler.times();
  }
  const double flops = model::model_flops_per_step(cfg, double(B) * m, T);
  const double achieved = flops / step_s;
  const double ceiling = runtime::device_gemm_ceiling(*backend, cfg, B, T);
  const int64_t tokens_per_step = int64_t{m} * B * T;
  const model::MemoryEstimate predicted = runtime::device_bytes(cfg, B, T, m, o.recompute);
  const double mib = 1 << 20;

  nlohmann::json j = {
      {"name", "weft"},
      {"device", backend->name()},
      {"model", cfg.name},
      {"params", model::gpt_param_layout(cfg).count()},
      {"B", B},
      {"T", T},
      {"microbatches", m},
      {"precision", "bf16-mixed"},
      {"recompute", std::string(model::recompute_name(o.recompute))},
      {"ms_median", step_s * 1e3},
      {"ms_min", times.front() * 1e3},
      {"tokens_per_s", tokens_per_step / step_s},
      {"model_tflops", achieved / 1e12},
      {"peak_tflops", o.peak_tflops},
      {"mfu_spec",
       o.peak_tflops > 0 ? nlohmann::json(achieved / (o.peak_tflops * 1e12)) : nlohmann::json()},
      {"gemm_ceiling_tflops", ceiling / 1e12},
      {"mfu_gemm", ceiling > 0 ? nlohmann::json(achieved / ceiling) : nlohmann::json()},
      {"loss", last.loss},
      {"host_waits_per_step", host_waits},
      {"mem_predicted_mib", predicted.total() / mib},
      {"mem_allocated_mib", backend->allocated_bytes() / mib},
  };
  if (o.profile) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& op : ops) {
      rows.push_back({{"op", op.op}, {"calls", op.calls}, {"ms", op.seconds * 1e3}});
    }
    j["profile"] = {{"step_ms", profiled_s * 1e3}, {"ops", rows}};
  }
  if (o.json) {
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print(
      "weft bench step: {} ({} parameters) on {}, bf16 mixed precision, B={} T={} x {} "
      "microbatch(es), recompute={}\n",
      cfg.name, model::gpt_param_layout(cfg).count(), backend->name(), B, T, m,
      model::recompute_name(o.recompute));
  fmt::print("  step          {:9.2f} ms (median of {}; min {:.2f} ms)   loss {:.4f}\n",
             step_s * 1e3, times.size(), times.front() * 1e3, last.loss);
  fmt::print("  throughput    {:9.0f} tokens/s\n", tokens_per_step / step_s);
  fmt::print("  host waits    {:9.1f} per step (uploads, downloads, syncs, norms)\n", host_waits);
  fmt::print("  model FLOP/s  {:9.2f} TFLOP/s  (72BTLC^2(1+T/6C+V/12LC) = {:.3g} FLOP/step)\n",
             achieved / 1e12, flops);
  if (o.peak_tflops > 0) {
    fmt::print("  spec peak     {:9.1f} TFLOP/s  -> MFU {:.1f}%\n", o.peak_tflops,
               100.0 * achieved / (o.peak_tflops * 1e12));
  }
  fmt::print(
      "  GEMM ceiling  {:9.2f} TFLOP/s  (this model's forward GEMM shapes, measured now) -> "
      "{:.1f}%\n",
      ceiling / 1e12, ceiling > 0 ? 100.0 * achieved / ceiling : 0.0);
  fmt::print(
      "  memory        predicted {:.1f} MiB = params {:.1f} + grads {:.1f} + optimizer {:.1f} + "
      "activations {:.1f} + workspace {:.1f}; allocated {:.1f} MiB\n",
      predicted.total() / mib, predicted.params / mib, predicted.grads / mib,
      predicted.optimizer / mib, predicted.activations / mib, predicted.workspace / mib,
      backend->allocated_bytes() / mib);
  if (o.profile) {
    double sum = 0;
    for (const auto& op : ops) sum += op.seconds;
    fmt::print(
        "  profile       one step with each op timed alone: {:.2f} ms, {:.2f} ms of it in ops "
        "(the rest: host work between them)\n",
        profiled_s * 1e3, sum * 1e3);
    for (const auto& op : ops) {
      fmt::print("    {:>9.3f} ms {:5.1f}%  x{:<4} {}\n", op.seconds * 1e3,
                 100.0 * op.seconds / profiled_s, op.calls, op.op);
    }
  }
}

}  // namespace weft::cli
