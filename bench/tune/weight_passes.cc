// Where a step's time goes as the micro-batch size changes (docs/planner.md §9, "The weight
// passes"): the CPU kernels of one step of bench/tune/run.sh's model (L=4, C=256, 4 heads,
// Vp=4096, T=64, 8 sequences, tp=1), in the step's order (per microbatch: the layers' forwards,
// the head, the layers' backwards), each layer on its own weights and each microbatch on its own
// activations as in a real step, timed by kind of kernel, at mb = 1, 2, 4, 8 (8/mb microbatches).
// Then a linear layer's GEMMs per call at 64 rows against 1/8 of one at 512, weights rotating
// through 24 MB of copies (L3, not L2): the small-M excess, and whether it follows the weight's
// size or is a constant per call.
//
// Built and run by bench/tune/weight_passes.sh against the release build's kernels (oneDNN sgemm,
// the trainer's own). Prints Markdown.
//
// Usage: weight_passes [REPS]   (default 12 steps per mb; medians)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weft/kernels/kernels.h"

namespace k = weft::kernels::cpu;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr int C = 256, NH = 4, T = 64, Vp = 4096, V = 4096, L = 4, kSeqs = 8;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One step's kernels at micro-batch size mb, per kind of kernel (s). `shared_weights`: every layer
// uses layer 0's weights (they stay in cache), to tell cache misses from per-call work.
std::map<std::string, double> step_kernels(int mb, bool shared_weights, std::vector<float>& W,
                                           std::vector<float>& G, std::vector<float>& A,
                                           std::vector<float>& D, std::vector<float>& stats,
                                           std::vector<float>& losses,
                                           const std::vector<int32_t>& targets) {
  const int64_t lw = int64_t{12} * C * C;   // a layer's linear weights
  const int64_t per_row = 13 * C + NH * T;  // a layer's activations per row
  const int N = mb * T, m = kSeqs / mb;
  std::map<std::string, double> t;
  auto tick = [&](const char* kind, const std::function<void()>& f) {
    const auto t0 = clock_type::now();
    f();
    t[kind] += std::chrono::duration<double>(clock_type::now() - t0).count();
  };
  float *mean = stats.data(), *rstd = stats.data() + kSeqs * T;
  const auto t0 = clock_type::now();
  for (int mi = 0; mi < m; ++mi) {
    float* base = A.data() + int64_t{mi} * N * (per_row * L + C + Vp);
    auto act = [&](int l, int64_t col) { return base + int64_t{l} * N * per_row + col * N; };
    auto w_of = [&](int l) { return W.data() + (shared_weights ? 0 : l * lw); };
    auto g_of = [&](int l) { return G.data() + (shared_weights ? 0 : l * lw); };
    // Activations of layer l: ln1 [N,C], qkv [N,3C], att [N,NH*T], atty [N,C], res [N,C], ln2,
    // fc [N,4C], gelu [N,4C], out [N,C].
    struct Acts {
      float *ln1, *qkv, *att, *atty, *res, *ln2, *fc, *ge, *out;
    };
    auto acts = [&](int l) {
      Acts a;
      a.ln1 = act(l, 0);
      a.qkv = act(l, C);
      a.att = act(l, 4 * C);
      a.atty = act(l, 4 * C + NH * T);
      a.res = a.atty + int64_t{N} * C;
      a.ln2 = a.res + int64_t{N} * C;
      a.fc = a.ln2 + int64_t{N} * C;
      a.ge = a.fc + int64_t{N} * 4 * C;
      a.out = a.ge + int64_t{N} * 4 * C;
      return a;
    };
    auto input_of = [&](int l) -> float* { return l == 0 ? A.data() : acts(l - 1).out; };
    for (int l = 0; l < L; ++l) {
      const Acts a = acts(l);
      float* w = w_of(l);
      const float* in = input_of(l);
      tick("layernorm", [&] { k::layernorm_forward(a.ln1, mean, rstd, in, w, w, N, C); });
      tick("linear GEMMs, forward", [&] { k::matmul_forward(a.qkv, a.ln1, w, w, N, C, 3 * C); });
      tick("attention", [&] { k::attention_forward(a.atty, a.att, a.qkv, mb, T, C, NH, NH); });
      tick("linear GEMMs, forward",
           [&] { k::matmul_forward(a.res, a.atty, w + 3 * C * C, w, N, C, C); });
      tick("residual, GeLU", [&] { k::residual_forward(a.res, a.res, in, int64_t{N} * C); });
      tick("layernorm", [&] { k::layernorm_forward(a.ln2, mean, rstd, a.res, w, w, N, C); });
      tick("linear GEMMs, forward",
           [&] { k::matmul_forward(a.fc, a.ln2, w + 4 * C * C, w, N, C, 4 * C); });
      tick("residual, GeLU", [&] { k::gelu_forward(a.ge, a.fc, int64_t{N} * 4 * C); });
      tick("linear GEMMs, forward",
           [&] { k::matmul_forward(a.out, a.ge, w + 8 * C * C, w, N, 4 * C, C); });
      tick("residual, GeLU", [&] { k::residual_forward(a.out, a.out, a.res, int64_t{N} * C); });
    }
    float* lnf = base + int64_t{L} * N * per_row;
    float* logits = lnf + int64_t{N} * C;
    float* wte = W.data() + (shared_weights ? 0 : L * lw);
    float* dwte = G.data() + (shared_weights ? 0 : L * lw);
    tick("layernorm",
         [&] { k::layernorm_forward(lnf, mean, rstd, acts(L - 1).out, W.data(), W.data(), N, C); });
    tick("LM head GEMMs", [&] { k::matmul_forward(logits, lnf, wte, nullptr, N, C, Vp); });
    tick("cross-entropy", [&] {
      k::softmax_cross_entropy_fused(losses.data(), logits, targets.data(), 1.f, N, V, Vp);
    });
    float *d_res = D.data(), *d_ln = d_res + int64_t{N} * C, *d_a = d_ln + int64_t{N} * C,
          *d_b = d_a + int64_t{N} * 4 * C;
    tick("LM head GEMMs",
         [&] { k::matmul_backward(d_ln, dwte, nullptr, logits, lnf, wte, N, C, Vp); });
    tick("layernorm", [&] {
      k::layernorm_backward(d_res, G.data(), G.data(), d_ln, acts(L - 1).out, W.data(), mean, rstd,
                            N, C);
    });
    for (int l = L - 1; l >= 0; --l) {
      const Acts a = acts(l);
      float *w = w_of(l), *g = g_of(l);
      const float* in = input_of(l);
      tick("linear GEMMs, backward", [&] {
        k::matmul_backward(d_a, g + 8 * C * C, g, d_res, a.ge, w + 8 * C * C, N, 4 * C, C);
      });
      tick("residual, GeLU", [&] { k::gelu_backward(d_b, a.fc, d_a, int64_t{N} * 4 * C); });
      tick("linear GEMMs, backward", [&] {
        k::matmul_backward(d_ln, g + 4 * C * C, g, d_b, a.ln2, w + 4 * C * C, N, C, 4 * C);
      });
      tick("layernorm",
           [&] { k::layernorm_backward(d_res, g, g, d_ln, a.res, w, mean, rstd, N, C); });
      tick("linear GEMMs, backward", [&] {
        k::matmul_backward(d_a, g + 3 * C * C, g, d_res, a.atty, w + 3 * C * C, N, C, C);
      });
      tick("attention", [&] { k::attention_backward(d_b, d_a, a.qkv, a.att, mb, T, C, NH, NH); });
      tick("linear GEMMs, backward",
           [&] { k::matmul_backward(d_ln, g, g, d_b, a.ln1, w, N, C, 3 * C); });
      tick("layernorm", [&] { k::layernorm_backward(d_res, g, g, d_ln, in, w, mean, rstd, N, C); });
    }
  }
  t["step"] = std::chrono::duration<double>(clock_type::now() - t0).count();
  return t;
}

// A linear layer's forward (matmul_forward) or backward (matmul_backward: dinp and dW) per call
// at M rows (us), weights rotating through `copies` buffers.
double linear_call_us(int M, int OC, int IC, bool backward, std::vector<float>& W,
                      std::vector<float>& G, int copies, std::vector<float>& act,
                      std::vector<float>& out) {
  const int64_t size = int64_t{OC} * IC;
  std::vector<double> v;
  for (int rep = 0; rep < 9; ++rep) {
    int calls = 0;
    const auto t0 = clock_type::now();
    double dt = 0;
    do {
      float* w = W.data() + (calls % copies) * size;
      float* g = G.data() + (calls % copies) * size;
      if (backward) {
        k::matmul_backward(out.data(), g, nullptr, act.data(), act.data(), w, M, IC, OC);
      } else {
        k::matmul_forward(out.data(), act.data(), w, nullptr, M, IC, OC);
      }
      ++calls;
      dt = std::chrono::duration<double>(clock_type::now() - t0).count();
    } while (dt < 0.02 || calls < copies);
    v.push_back(dt / calls);
  }
  return median(v) * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 12;
  weft::kernels::set_num_threads(1);
  const int64_t rows = int64_t{kSeqs} * T;
  std::vector<float> W(int64_t{L} * 12 * C * C + int64_t{Vp} * C, 0.01f), G(W.size(), 0.f);
  std::vector<float> A(rows * ((13 * C + NH * T) * L + C + Vp) + rows * C, 0.01f);
  std::vector<float> D(rows * 10 * C, 0.f), stats(2 * rows, 1.f), losses(rows);
  std::vector<int32_t> targets(rows, 5);
  const std::vector<int> mbs = {1, 2, 4, 8};

  for (const bool shared : {false, true}) {
    std::map<int, std::map<std::string, std::vector<double>>> runs;
    for (int rep = 0; rep < reps; ++rep) {
      for (int mb : mbs) {  // interleaved, so a slow spell of the machine hits every mb alike
        for (const auto& [kind, s] : step_kernels(mb, shared, W, G, A, D, stats, losses, targets))
          runs[mb][kind].push_back(s);
      }
    }
    std::printf("\n### One step's kernels, ms (median of %d), %s\n\n", reps,
                shared ? "every layer on layer 0's weights (kept in cache)"
                       : "each layer on its own weights, as in a step");
    std::printf("| kernels | mb=1 (8 microbatches) | mb=2 | mb=4 | mb=8 (1) | mb=1 - mb=8 |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
    for (const auto& [kind, unused] : runs[1]) {
      std::printf("| %s |", kind.c_str());
      for (int mb : mbs) std::printf(" %.2f |", median(runs[mb][kind]) * 1e3);
      std::printf(" %+.2f |\n", (median(runs[1][kind]) - median(runs[8][kind])) * 1e3);
    }
  }

  std::printf("\n### A linear layer's GEMMs per call, us: 64 rows against 1/8 of 512 rows\n\n");
  std::printf(
      "| weight OC x IC | KiB | forward 64 | 512/8 | excess | us per MiB | backward 64 "
      "| 512/8 | excess | us per MiB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<float> act(512 * 4096, 0.01f), out(512 * 4096, 0.f);
  for (const auto& [OC, IC] : std::vector<std::pair<int, int>>{{768, 256},
                                                               {256, 256},
                                                               {1024, 256},
                                                               {256, 1024},
                                                               {4096, 256},
                                                               {384, 256},
                                                               {128, 256},
                                                               {512, 256},
                                                               {256, 512},
                                                               {2048, 256},
                                                               {64, 64}}) {
    const int64_t size = int64_t{OC} * IC;
    const int copies = static_cast<int>(std::max<int64_t>(2, (24 << 20) / 4 / size));
    std::vector<float> w(size * copies, 0.01f), g(size * copies, 0.f);
    const double kib = size * 4 / 1024.0;
    std::printf("| %d x %d | %.0f |", OC, IC, kib);
    for (const bool backward : {false, true}) {
      const double small = linear_call_us(64, OC, IC, backward, w, g, copies, act, out);
      const double large = linear_call_us(512, OC, IC, backward, w, g, copies, act, out) / 8;
      std::printf(" %.1f | %.1f | %.1f | %.0f |", small, large, small - large,
                  (small - large) / (kib / 1024));
    }
    std::printf("\n");
  }
  return 0;
}
