// Microbenchmark of the CUDA kernels at GPT-2 shapes (bench/gpu/run.sh runs it on the device).
// Measures, in one run, the two ceilings of the machine (a device-to-device copy for bandwidth,
// a large cuBLASLt bf16 GEMM for matrix rate) and each kernel against the one that bounds it:
//   - linear layers (cuBLASLt, bf16 in, fp32 accumulate) of GPT-2 124M at B*T = 16384: TFLOP/s
//   - flash attention forward and backward at T=1024, HS=64 (and 128): TFLOP/s, counted as
//     FlashAttention-2 does (causal: half of 4 B NH T^2 HS forward; backward 2.5x the forward);
//     and grouped-query, 12 query heads on 4 key/value heads (the same FLOPs)
//   - LayerNorm and RMSNorm (plain, fused with the residual, backward), SwiGLU, RoPE,
//     softmax + cross-entropy, AdamW over GPT-2 124M's parameter list, sum of squares: GB/s of
//     the fewest bytes each must move
// Timing: CUDA events around each call, warm-up first, median of the repeats (METHOD.md). Inputs
// are random, never zeros. Prints a table; --json FILE and --md FILE write the numbers.
//
//   kernels_bench [--json FILE] [--md FILE] [--reps N]

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "weft/core/dtype.h"
#include "weft/kernels/cuda/arena.h"
#include "weft/kernels/cuda/context.h"
#include "weft/kernels/cuda/cuda_check.h"
#include "weft/kernels/cuda/kernels_cuda.h"

namespace weft::kernels::cuda {
namespace {

struct Result {
  std::string group;
  std::string name;
  std::string shape;
  double ms;
  double rate;  // TFLOP/s or GB/s
  std::string unit;
  double of_ceiling;  // rate / the ceiling measured in this run
};

class Bench {
 public:
  Bench(size_t arena_bytes, int reps) : arena_(arena_bytes), ctx_(arena_), reps_(reps) {
    WEFT_CUDA_CHECK(cudaEventCreate(&start_));
    WEFT_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Bench() {
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
  }

  Arena& arena() { return arena_; }
  Context& ctx() { return ctx_; }

  // Median of reps_ timed calls after 3 warm-up calls, in milliseconds.
  double time_ms(const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();
    WEFT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> times;
    for (int i = 0; i < reps_; ++i) {
      WEFT_CUDA_CHECK(cudaEventRecord(start_, ctx_.stream()));
      f();
      WEFT_CUDA_CHECK(cudaEventRecord(stop_, ctx_.stream()));
      WEFT_CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0.f;
      WEFT_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }

  // Device buffers of random values in [-1, 1] (generated on the host once per size, then
  // converted on the device for 16-bit buffers).
  float* random_f32(int64_t n, float lo = -1.f, float hi = 1.f) {
    float* p = arena_.allocate<float>(n);
    std::vector<float> host(static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 24)));
    std::uniform_real_distribution<float> dist(lo, hi);
    for (float& x : host) x = dist(rng_);
    for (int64_t done = 0; done < n; done += static_cast<int64_t>(host.size())) {
      const int64_t count = std::min<int64_t>(n - done, static_cast<int64_t>(host.size()));
      copy_to_device(p + done, host.data(), static_cast<size_t>(count) * sizeof(float));
    }
    return p;
  }
  BF16* random_bf16(int64_t n, float lo = -1.f, float hi = 1.f) {
    BF16* p = arena_.allocate<BF16>(n);
    const size_t mark = arena_.mark();
    float* wide = random_f32(n, lo, hi);  // staging, released below
    convert(p, wide, n, ctx_.stream());
    WEFT_CUDA_CHECK(cudaDeviceSynchronize());
    arena_.release(mark);
    return p;
  }

  void add(Result r) {
    std::printf("%-10s %-34s %-30s %9.3f ms %9.1f %-7s %6.1f%%\n", r.group.c_str(), r.name.c_str(),
                r.shape.c_str(), r.ms, r.rate, r.unit.c_str(), 100.0 * r.of_ceiling);
    std::fflush(stdout);
    results_.push_back(std::move(r));
  }
  const std::vector<Result>& results() const { return results_; }

 private:
  Arena arena_;
  Context ctx_;
  int reps_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  std::mt19937 rng_{20261201};
  std::vector<Result> results_;
};

std::string shape_string(std::initializer_list<int64_t> dims) {
  std::ostringstream os;
  bool first = true;
  for (int64_t d : dims) {
    os << (first ? "" : "x") << d;
    first = false;
  }
  return os.str();
}

double tflops(double flops, double ms) { return flops / (ms * 1e-3) / 1e12; }
double gbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

int run(int argc, char** argv) {
  std::string json_path;
  std::string md_path;
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (arg == "--md" && i + 1 < argc) {
      md_path = argv[++i];
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: kernels_bench [--json FILE] [--md FILE] [--reps N]\n");
      return 2;
    }
  }
  if (device_count() == 0) {
    std::fprintf(stderr, "kernels_bench: no CUDA device visible\n");
    return 1;
  }
  cudaDeviceProp prop{};
  WEFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  int runtime = 0;
  WEFT_CUDA_CHECK(cudaDriverGetVersion(&driver));
  WEFT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::ostringstream machine;
  machine << prop.name << ", sm_" << prop.major << prop.minor << ", " << prop.multiProcessorCount
          << " SMs, " << (prop.totalGlobalMem >> 30) << " GiB, L2 " << (prop.l2CacheSize >> 20)
          << " MiB, driver " << driver << ", runtime " << runtime;
  std::printf("weft kernels_bench  %s\n%s\nmedian of %d timed calls after 3 warm-ups\n\n", date,
              machine.str().c_str(), reps);
  std::printf("%-10s %-34s %-30s %12s %9s %-7s %7s\n", "group", "kernel", "shape", "time", "rate",
              "unit", "of ceil");

  Bench bench(size_t{40} << 30, reps);
  Arena& arena = bench.arena();
  Context& ctx = bench.ctx();

  // ---- ceilings -------------------------------------------------------------------------------
  double copy_gbps = 0.0;
  {
    const size_t mark = arena.mark();
    const int64_t n = int64_t{1} << 29;  // 2 GiB of floats
    float* a = bench.random_f32(n);
    float* b = arena.allocate<float>(n);
    const double ms = bench.time_ms([&] {
      WEFT_CUDA_CHECK(cudaMemcpyAsync(b, a, static_cast<size_t>(n) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, ctx.stream()));
    });
    copy_gbps = gbps(2.0 * n * sizeof(float), ms);  // read + write
    bench.add(
        {"ceiling", "device-to-device copy (read+write)", "2 GiB", ms, copy_gbps, "GB/s", 1.0});
    arena.release(mark);
  }
  double gemm_tflops = 0.0;
  {
    const size_t mark = arena.mark();
    const int n = 8192;
    BF16* a = bench.random_bf16(int64_t{n} * n);
    BF16* w = bench.random_bf16(int64_t{n} * n);
    BF16* out = arena.allocate<BF16>(int64_t{n} * n);
    const double ms =
        bench.time_ms([&] { linear_forward(ctx, out, nullptr, a, w, nullptr, n, n, n); });
    gemm_tflops = tflops(2.0 * n * n * n, ms);
    bench.add({"ceiling", "cuBLASLt bf16 GEMM", shape_string({n, n, n}), ms, gemm_tflops, "TFLOP/s",
               1.0});
    arena.release(mark);
  }

  // ---- linear layers of GPT-2 124M, B*T = 16384 ------------------------------------------------
  {
    const int N = 16 * 1024;
    const int C = 768;
    struct Layer {
      const char* name;
      int IC;
      int OC;
      bool gelu;
    };
    const Layer layers[] = {{"qkv", C, 3 * C, false},
                            {"attn proj", C, C, false},
                            {"fc + gelu", C, 4 * C, true},
                            {"mlp proj", 4 * C, C, false},
                            {"lm_head (V=50304)", C, 50304, false}};
    for (const Layer& l : layers) {
      const size_t mark = arena.mark();
      BF16* x = bench.random_bf16(int64_t{N} * l.IC);
      BF16* w = bench.random_bf16(int64_t{l.OC} * l.IC, -0.05f, 0.05f);
      BF16* b = bench.random_bf16(l.OC);
      BF16* out = arena.allocate<BF16>(int64_t{N} * l.OC);
      BF16* pre = l.gelu ? arena.allocate<BF16>(int64_t{N} * l.OC) : nullptr;
      const double flops = 2.0 * N * l.IC * l.OC;
      const std::string shape = shape_string({N, l.IC, l.OC});
      double ms = bench.time_ms([&] { linear_forward(ctx, out, pre, x, w, b, N, l.IC, l.OC); });
      bench.add({"linear", std::string(l.name) + " fwd", shape, ms, tflops(flops, ms), "TFLOP/s",
                 tflops(flops, ms) / gemm_tflops});
      BF16* dout = bench.random_bf16(int64_t{N} * l.OC);
      BF16* dx = arena.allocate<BF16>(int64_t{N} * l.IC);
      float* dw = arena.allocate<float>(int64_t{l.OC} * l.IC);
      float* db = arena.allocate<float>(l.OC);
      WEFT_CUDA_CHECK(cudaMemset(dw, 0, static_cast<size_t>(l.OC) * l.IC * sizeof(float)));
      WEFT_CUDA_CHECK(cudaMemset(db, 0, static_cast<size_t>(l.OC) * sizeof(float)));
      ms = bench.time_ms(
          [&] { linear_backward(ctx, dx, dw, db, dout, x, w, nullptr, N, l.IC, l.OC); });
      bench.add({"linear", std::string(l.name) + " bwd (dinp,dW,db)", shape, ms,
                 tflops(2 * flops, ms), "TFLOP/s", tflops(2 * flops, ms) / gemm_tflops});
      arena.release(mark);
    }
  }

  // ---- memory-bound kernels ------------------------------------------------------------------
  {
    const int N = 64 * 1024;  // rows; 100 MB per bf16 tensor, above the L2
    const int C = 768;
    const int64_t nc = int64_t{N} * C;
    const size_t mark = arena.mark();
    BF16* a = bench.random_bf16(nc, -2.f, 2.f);
    BF16* b = bench.random_bf16(nc);
    BF16* w = bench.random_bf16(C);
    BF16* bias = bench.random_bf16(C);
    BF16* out = arena.allocate<BF16>(nc);
    BF16* residual = arena.allocate<BF16>(nc);
    float* mean = arena.allocate<float>(N);
    float* rstd = arena.allocate<float>(N);
    const std::string shape = shape_string({N, C}) + " bf16";
    double ms = bench.time_ms(
        [&] { layernorm_forward(out, mean, rstd, a, w, bias, N, C, {}, ctx.stream()); });
    double bytes = 2.0 * nc * 2 + 8.0 * N;
    bench.add({"memory", "layernorm fwd", shape, ms, gbps(bytes, ms), "GB/s",
               gbps(bytes, ms) / copy_gbps});
    ms = bench.time_ms([&] {
      fused_residual_layernorm_forward(residual, out, mean, rstd, a, b, w, bias, N, C, {},
                                       ctx.stream());
    });
    bytes = 4.0 * nc * 2 + 8.0 * N;
    bench.add({"memory", "residual + layernorm fwd", shape, ms, gbps(bytes, ms), "GB/s",
               gbps(bytes, ms) / copy_gbps});
    float* dw = arena.allocate<float>(C);
    float* db = arena.allocate<float>(C);
    WEFT_CUDA_CHECK(cudaMemset(dw, 0, C * sizeof(float)));
    WEFT_CUDA_CHECK(cudaMemset(db, 0, C * sizeof(float)));
    ms = bench.time_ms(
        [&] { layernorm_backward(ctx, residual, dw, db, b, a, w, mean, rstd, N, C, {}); });
    bytes = 4.0 * nc * 2 + 8.0 * N;  // dout, inp, dinp read + written
    bench.add({"memory", "layernorm bwd", shape, ms, gbps(bytes, ms), "GB/s",
               gbps(bytes, ms) / copy_gbps});
    // RMSNorm (Llama's): no mean, no bias.
    const Norm rms{.rms = true};
    ms = bench.time_ms(
        [&] { layernorm_forward(out, nullptr, rstd, a, w, nullptr, N, C, rms, ctx.stream()); });
    bytes = 2.0 * nc * 2 + 4.0 * N;
    bench.add(
        {"memory", "rmsnorm fwd", shape, ms, gbps(bytes, ms), "GB/s", gbps(bytes, ms) / copy_gbps});
    ms = bench.time_ms(
        [&] { layernorm_backward(ctx, residual, dw, nullptr, b, a, w, nullptr, rstd, N, C, rms); });
    bytes = 4.0 * nc * 2 + 4.0 * N;
    bench.add(
        {"memory", "rmsnorm bwd", shape, ms, gbps(bytes, ms), "GB/s", gbps(bytes, ms) / copy_gbps});
    arena.release(mark);
  }
  {
    // SwiGLU at GPT-2 124M's MLP width (F = 4C) and RoPE over its q and k heads (12 of 64), both
    // at B*T = 16384.
    const int B = 16, T = 1024, N = B * T, C = 768, F = 4 * C, NH = 12, HS = 64;
    const int64_t nf = int64_t{N} * F;
    const size_t mark = arena.mark();
    BF16* inp = bench.random_bf16(2 * nf, -4.f, 4.f);
    BF16* out = arena.allocate<BF16>(nf);
    BF16* dout = bench.random_bf16(nf);
    BF16* dinp = arena.allocate<BF16>(2 * nf);
    const std::string shape = shape_string({N, F}) + " bf16";
    double ms = bench.time_ms([&] { swiglu_forward(out, inp, N, F, ctx.stream()); });
    double bytes = 3.0 * nf * 2;
    bench.add(
        {"memory", "swiglu fwd", shape, ms, gbps(bytes, ms), "GB/s", gbps(bytes, ms) / copy_gbps});
    ms = bench.time_ms([&] { swiglu_backward(dinp, dout, inp, N, F, ctx.stream()); });
    bytes = 5.0 * nf * 2;
    bench.add(
        {"memory", "swiglu bwd", shape, ms, gbps(bytes, ms), "GB/s", gbps(bytes, ms) / copy_gbps});
    BF16* qkv = bench.random_bf16(int64_t{N} * 3 * C);
    ms = bench.time_ms([&] { rope(qkv, B, T, NH, NH, HS, 10000.f, false, ctx.stream()); });
    bytes = 2.0 * N * 2 * C * 2;  // q and k read and written
    bench.add({"memory", "rope fwd", "B16 T1024 NH12 NKV12 HS64", ms, gbps(bytes, ms), "GB/s",
               gbps(bytes, ms) / copy_gbps});
    arena.release(mark);
  }
  {
    const int N = 16 * 1024;
    const int V = 50257;
    const int Vp = 50304;
    const size_t mark = arena.mark();
    BF16* logits = bench.random_bf16(int64_t{N} * Vp, -4.f, 4.f);
    int32_t* targets = arena.allocate<int32_t>(N);
    std::vector<int32_t> host(N);
    for (int i = 0; i < N; ++i) host[i] = (i * 7919) % V;
    copy_to_device(targets, host.data(), host.size() * sizeof(int32_t));
    float* losses = arena.allocate<float>(N);
    // In place: the logits become gradients, which is what every later call then reads (finite
    // values in the same range, so the timing is that of real data).
    const double ms = bench.time_ms([&] {
      softmax_cross_entropy_fused(losses, logits, targets, 1.f / N, N, V, Vp, ctx.stream());
    });
    const double bytes = 2.0 * N * Vp * 2;  // logits read once, gradient written once
    bench.add({"memory", "softmax + cross-entropy fused", shape_string({N, Vp}) + " bf16", ms,
               gbps(bytes, ms), "GB/s", gbps(bytes, ms) / copy_gbps});
    arena.release(mark);
  }
  {
    // GPT-2 124M's parameters, one segment per tensor (148 segments, 124.4M parameters).
    const int64_t C = 768;
    std::vector<int64_t> sizes = {50304 * C, 1024 * C};
    for (int l = 0; l < 12; ++l) {
      for (const int64_t s :
           {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C}) {
        sizes.push_back(s);
      }
    }
    sizes.push_back(C);
    sizes.push_back(C);
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    const size_t mark = arena.mark();
    float* params = bench.random_f32(total);
    float* grads = bench.random_f32(total);
    float* m = bench.random_f32(total, -0.01f, 0.01f);
    float* v = bench.random_f32(total, 0.f, 0.01f);
    BF16* copy = arena.allocate<BF16>(total);
    std::vector<AdamWSegment> segments;
    int64_t offset = 0;
    for (int64_t s : sizes) {
      segments.push_back({params + offset, grads + offset, m + offset, v + offset, copy + offset, s,
                          s > C ? 0.1f : 0.f});
      offset += s;
    }
    const AdamWPlan plan(arena, segments);
    int t = 1;
    double ms =
        bench.time_ms([&] { plan.step(1e-4f, 0.9f, 0.95f, 1e-8f, t++, 1.f, ctx.stream()); });
    double bytes = 30.0 * total;  // p, m, v read + written, g read, bf16 copy written
    bench.add({"memory", "adamw, 148 tensors, bf16 copy",
               std::to_string(total / 1000000) + "M params", ms, gbps(bytes, ms), "GB/s",
               gbps(bytes, ms) / copy_gbps});
    double* norm = arena.allocate<double>(1);
    ms = bench.time_ms([&] { sum_squares(ctx, norm, grads, total); });
    bytes = 4.0 * total;
    bench.add({"memory", "sum of squares (grad norm)", std::to_string(total / 1000000) + "M fp32",
               ms, gbps(bytes, ms), "GB/s", gbps(bytes, ms) / copy_gbps});
    arena.release(mark);
  }
  // ---- flash attention, T = 1024 (last: the newest kernels; the rest is printed already) ---
  struct FlashShape {
    int HS, NKV_divisor;  // NKV = NH / NKV_divisor
  };
  for (const FlashShape fs : {FlashShape{64, 1}, FlashShape{128, 1}, FlashShape{64, 3}}) {
    const int B = 16;
    const int T = 1024;
    const int C = 768;
    const int HS = fs.HS;
    const int NH = C / HS;
    const int NKV = NH / fs.NKV_divisor;
    const int64_t W = C + 2 * int64_t{NKV} * HS;
    const size_t mark = arena.mark();
    BF16* qkv = bench.random_bf16(int64_t{B} * T * W, -2.f, 2.f);
    BF16* out = arena.allocate<BF16>(int64_t{B} * T * C);
    float* lse = arena.allocate<float>(int64_t{B} * NH * T);
    BF16* dout = bench.random_bf16(int64_t{B} * T * C);
    BF16* dqkv = arena.allocate<BF16>(int64_t{B} * T * W);
    const double fwd_flops = 4.0 * B * NH * double{T} * T * HS / 2;  // causal: half the scores
    std::ostringstream shape_os;  // (not string concatenation: GCC 12 warns falsely, PR 105329)
    shape_os << "B" << B << " NH" << NH << " T" << T << " HS" << HS;
    if (NKV != NH) shape_os << " NKV" << NKV;
    const std::string shape = shape_os.str();
    const double fwd = bench.time_ms(
        [&] { flash_attention_forward(out, lse, qkv, B, T, C, NH, NKV, ctx.stream()); });
    bench.add({"attention", "flash fwd", shape, fwd, tflops(fwd_flops, fwd), "TFLOP/s",
               tflops(fwd_flops, fwd) / gemm_tflops});
    const double bwd = bench.time_ms(
        [&] { flash_attention_backward(ctx, dqkv, dout, qkv, out, lse, B, T, C, NH, NKV); });
    bench.add({"attention", "flash bwd", shape, bwd, tflops(2.5 * fwd_flops, bwd), "TFLOP/s",
               tflops(2.5 * fwd_flops, bwd) / gemm_tflops});
    bench.add({"attention", "flash fwd+bwd", shape, fwd + bwd, tflops(3.5 * fwd_flops, fwd + bwd),
               "TFLOP/s", tflops(3.5 * fwd_flops, fwd + bwd) / gemm_tflops});
    arena.release(mark);
  }

  WEFT_CUDA_CHECK(cudaDeviceSynchronize());

  if (!json_path.empty()) {
    std::ofstream os(json_path);
    os << "{\"date\": \"" << date << "\", \"machine\": \"" << json_escape(machine.str())
       << "\", \"reps\": " << reps << ", \"results\": [\n";
    for (size_t i = 0; i < bench.results().size(); ++i) {
      const Result& r = bench.results()[i];
      os << "  {\"group\": \"" << r.group << "\", \"kernel\": \"" << json_escape(r.name)
         << "\", \"shape\": \"" << r.shape << "\", \"ms\": " << r.ms << ", \"rate\": " << r.rate
         << ", \"unit\": \"" << r.unit << "\", \"of_ceiling\": " << r.of_ceiling << "}"
         << (i + 1 < bench.results().size() ? ",\n" : "\n");
    }
    os << "]}\n";
  }
  if (!md_path.empty()) {
    std::ofstream os(md_path);
    os << "# CUDA kernels, " << date << "\n\n"
       << "Machine: " << machine.str() << ".  \n"
       << "`bench/gpu/run.sh` (bench/gpu/kernels_bench.cc): median of " << reps
       << " calls after 3 warm-ups, CUDA events, random inputs. \"Of ceiling\" is the rate over "
          "the ceiling measured in the same run: the cuBLASLt bf16 GEMM for matrix work, the "
          "device-to-device copy for memory-bound kernels (bytes = the fewest each kernel must "
          "move). Flash attention FLOPs are counted as FlashAttention-2 counts them (causal "
          "forward 2 B NH T^2 HS, backward 2.5x that), although weft's deterministic backward "
          "does 7/5 of that work.\n\n"
       << "| group | kernel | shape | ms | rate | unit | of ceiling |\n"
       << "|---|---|---|---:|---:|---|---:|\n";
    for (const Result& r : bench.results()) {
      char line[512];
      std::snprintf(line, sizeof(line), "| %s | %s | %s | %.3f | %.1f | %s | %.1f%% |\n",
                    r.group.c_str(), r.name.c_str(), r.shape.c_str(), r.ms, r.rate, r.unit.c_str(),
                    100.0 * r.of_ceiling);
      os << line;
    }
  }
  return 0;
}

}  // namespace
}  // namespace weft::kernels::cuda

int main(int argc, char** argv) {
  try {
    return weft::kernels::cuda::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_bench: %s\n", e.what());
    return 1;
  }
}
