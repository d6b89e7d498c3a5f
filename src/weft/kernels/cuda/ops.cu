// The CUDA kernels other than the matrix products (linear.cc) and flash attention
// (flash_attention.cu): embedding, LayerNorm and RMSNorm, GeLU, SwiGLU, rotary embeddings,
// residual, softmax + cross-entropy, AdamW, the reductions and the bf16 conversion. Each kernel is
// written once on a device storage type T
// (__nv_bfloat16, or float where an fp32 tensor is read); arithmetic is fp32 throughout.
// Reductions that produce parameter gradients run in a fixed order (no atomics), so a step gives
// the same bits every time.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "weft/kernels/cuda/common.cuh"
#include "weft/kernels/cuda/cuda_check.h"
#include "weft/kernels/cuda/host_plans.h"
#include "weft/kernels/cuda/internal.h"
#include "weft/kernels/cuda/kernels_cuda.h"
#include "weft/kernels/vocab_parallel_ce.h"

namespace weft::kernels::cuda {
namespace detail {
namespace {

#define WEFT_GRID_STRIDE(i, n)                                                           \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// 16 bytes of T: what one lane loads or stores at once (8 bf16, 4 floats). Hopper moves a warp's
// 16-byte accesses in a quarter of the instructions of 4-byte ones (HOPPER.md).
template <typename T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- conversions --------------------------------------------------------------------------

template <typename To, typename From>
__global__ void convert_kernel(To* out, const From* in, int64_t n) {
  WEFT_GRID_STRIDE(i, n) { out[i] = from_float<To>(to_float(in[i])); }
}

template <typename To, typename From>
void launch_convert(To* out, const From* in, int64_t n, Stream stream) {
  WEFT_CHECK(n >= 0, "negative element count ", n);
  if (n == 0) return;
  convert_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(dev(out), dev(in), n);
  WEFT_CUDA_CHECK_LAUNCH();
}

// ---- embedding --------------------------------------------------------------------------------

// out[b,t,c] = wte[tokens[b,t], c] + wpe[t, c]; wpe null (rotary models): the wte row, exact.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         int T_, int C, int64_t n) {
  WEFT_GRID_STRIDE(i, n) {
    const int64_t bt = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(bt % T_);
    const int64_t token = tokens[bt];
    if (wpe == nullptr) {
      out[i] = wte[token * C + c];
      continue;
    }
    out[i] = from_float<T>(to_float(wte[token * C + c]) +
                           to_float(wpe[static_cast<int64_t>(t) * C + c]));
  }
}

// A tensor-parallel rank's partial embedding (vocabulary shard [v0, v0 + Vl) of wte):
// out[b,t,c] = (v0 <= token < v0 + Vl ? wte[token - v0, c] : 0) + (wpe ? wpe[t, c] : 0), the
// expression of embedding_forward_kernel with the missing terms read as 0.
template <typename T>
__global__ void embedding_forward_shard_kernel(T* out, const int32_t* tokens, const T* wte,
                                               const T* wpe, int T_, int C, int v0, int Vl,
                                               int64_t n) {
  WEFT_GRID_STRIDE(i, n) {
    const int64_t bt = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(bt % T_);
    const int64_t row = static_cast<int64_t>(tokens[bt]) - v0;
    const float e = row >= 0 && row < Vl ? to_float(wte[row * C + c]) : 0.f;
    const float p = wpe != nullptr ? to_float(wpe[static_cast<int64_t>(t) * C + c]) : 0.f;
    out[i] = from_float<T>(e + p);
  }
}

// dwpe[t,c] += sum over b of dout[b,t,c], b in order.
template <typename T>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const T* dout, int B, int T_, int C) {
  const int64_t n = static_cast<int64_t>(T_) * C;
  WEFT_GRID_STRIDE(i, n) {
    float acc = 0.f;
    for (int b = 0; b < B; ++b) acc += to_float(dout[static_cast<int64_t>(b) * n + i]);
    dwpe[i] += acc;
  }
}

// One block per run of equal tokens (host_plans.h: group_tokens): dwte[token, c] += the run's
// dout rows, summed in position order.
template <typename T>
__global__ void embedding_backward_wte_kernel(float* dwte, const T* dout, const int32_t* positions,
                                              const int32_t* run_starts, const int32_t* run_tokens,
                                              int C) {
  const int run = blockIdx.x;
  const int begin = run_starts[run];
  const int end = run_starts[run + 1];
  float* row = dwte + static_cast<int64_t>(run_tokens[run]) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.f;
    for (int k = begin; k < end; ++k)
      acc += to_float(dout[static_cast<int64_t>(positions[k]) * C + c]);
    row[c] += acc;
  }
}

template <typename T>
void launch_embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B,
                              int T_, int C, Stream stream) {
  WEFT_CHECK(B >= 0 && T_ >= 0 && C > 0, "embedding with B=", B, " T=", T_, " C=", C);
  const int64_t n = static_cast<int64_t>(B) * T_ * C;
  if (n == 0) return;
  embedding_forward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
      dev(out), tokens, dev(wte), dev(wpe), T_, C, n);
  WEFT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_embedding_forward_shard(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                    int B, int T_, int C, int v0, int Vl, Stream stream) {
  WEFT_CHECK(B >= 0 && T_ >= 0 && C > 0 && v0 >= 0 && Vl >= 0, "embedding shard with B=", B,
             " T=", T_, " C=", C, " v0=", v0, " Vl=", Vl);
  const int64_t n = static_cast<int64_t>(B) * T_ * C;
  if (n == 0) return;
  embedding_forward_shard_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
      dev(out), tokens, dev(wte), dev(wpe), T_, C, v0, Vl, n);
  WEFT_CUDA_CHECK_LAUNCH();
}

// dwte rows from a plan of runs (host_plans.h; the full vocabulary's or a shard's, whose
// run_tokens are local rows), then dwpe[T,C] += the sum over b of EVERY position (it does not
// depend on the plan; skipped when dwpe is null).
template <typename T>
void launch_embedding_backward_runs(Context& ctx, float* dwte, float* dwpe, const T* dout,
                                    const TokenRuns& runs, int B, int T_, int C) {
  if (runs.num_runs() > 0) {  // a shard may hold none of the batch's tokens (an empty grid fails)
    // One upload of the plan: positions[P] | run_starts[R+1] | run_tokens[R].
    const int64_t P = static_cast<int64_t>(runs.positions.size());
    std::vector<int32_t> plan(runs.positions);
    plan.insert(plan.end(), runs.run_starts.begin(), runs.run_starts.end());
    plan.insert(plan.end(), runs.run_tokens.begin(), runs.run_tokens.end());
    auto* device_plan = static_cast<int32_t*>(ctx.scratch(plan.size() * sizeof(int32_t)));
    // From pageable memory: returns once `plan` is staged, so it may go out of scope.
    copy_host_to_device_async(device_plan, plan.data(), plan.size() * sizeof(int32_t),
                              ctx.stream());
    const int32_t* positions = device_plan;
    const int32_t* run_starts = positions + P;
    const int32_t* run_tokens = run_starts + runs.num_runs() + 1;
    embedding_backward_wte_kernel<<<runs.num_runs(), 256, 0, ctx.stream()>>>(
        dwte, dev(dout), positions, run_starts, run_tokens, C);
    WEFT_CUDA_CHECK_LAUNCH();
  }
  if (dwpe == nullptr) return;
  const int64_t n = static_cast<int64_t>(T_) * C;
  embedding_backward_wpe_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, ctx.stream()>>>(
      dwpe, dev(dout), B, T_, C);
  WEFT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_embedding_backward(Context& ctx, float* dwte, float* dwpe, const T* dout,
                               const int32_t* tokens_host, int B, int T_, int C) {
  WEFT_CHECK(B >= 0 && T_ >= 0 && C > 0, "embedding with B=", B, " T=", T_, " C=", C);
  const int64_t N = static_cast<int64_t>(B) * T_;
  if (N == 0) return;
  const TokenRuns runs = group_tokens({tokens_host, static_cast<size_t>(N)});
  launch_embedding_backward_runs(ctx, dwte, dwpe, dout, runs, B, T_, C);
}

// The shard's plan holds only its tokens, at local rows; each row's sum is the one the unsharded
// plan gives (same positions, same order), so the result is as deterministic and the ranks'
// dwte concatenated are embedding_backward's.
template <typename T>
void launch_embedding_backward_shard(Context& ctx, float* dwte, float* dwpe, const T* dout,
                                     const int32_t* tokens_host, int B, int T_, int C, int v0,
                                     int Vl) {
  WEFT_CHECK(B >= 0 && T_ >= 0 && C > 0 && v0 >= 0 && Vl >= 0, "embedding shard with B=", B,
             " T=", T_, " C=", C, " v0=", v0, " Vl=", Vl);
  const int64_t N = static_cast<int64_t>(B) * T_;
  if (N == 0) return;
  const TokenRuns runs = group_tokens_in_range({tokens_host, static_cast<size_t>(N)}, v0, Vl);
  launch_embedding_backward_runs(ctx, dwte, dwpe, dout, runs, B, T_, C);
}

// ---- LayerNorm and RMSNorm ---------------------------------------------------------------------
// Ba, Kiros & Hinton 2016; biased variance, eps inside the square root (as ref::layernorm_*).
// RMSNorm (Zhang & Sennrich 2019; norm.rms) is the same arithmetic with the mean taken as 0 (x - 0
// is exact): no mean pass, no mean saved (mean null), no bias, and no mean_c(dnorm) term in the
// backward. A null LayerNorm bias adds nothing.
// One warp per row; the row is read from global memory once per pass (the later passes hit L1).

constexpr int kRowsPerBlock = 4;  // warps per block

// With kResidual: residual = a + b (rounded to T) is normalized; else a is. mean may be null.
template <typename T, bool kResidual>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, T* residual, const T* a,
                                         const T* b, const T* weight, const T* bias, int N, int C,
                                         Norm norm) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const T* x = (kResidual ? residual : a) + row * C;
  float sum = 0.f;
  if constexpr (kResidual) {
    // Each lane later re-reads exactly the elements it writes here.
    for (int c = lane; c < C; c += kWarpSize) {
      const T r = from_float<T>(to_float(a[row * C + c]) + to_float(b[row * C + c]));
      residual[row * C + c] = r;
      sum += to_float(r);
    }
  } else if (!norm.rms) {
    for (int c = lane; c < C; c += kWarpSize) sum += to_float(x[c]);
  }
  // norm.rms is the same for every lane: the branch keeps the warp together for the shuffles.
  const float m = norm.rms ? 0.f : warp_sum(sum) / C;
  float var = 0.f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float d = to_float(x[c]) - m;
    var += d * d;
  }
  const float s = 1.f / sqrtf(warp_sum(var) / C + norm.eps);
  T* y = out + row * C;
  if (bias != nullptr) {
    for (int c = lane; c < C; c += kWarpSize) {
      y[c] = from_float<T>((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
    }
  } else {
    for (int c = lane; c < C; c += kWarpSize) {
      y[c] = from_float<T>((to_float(x[c]) - m) * s * to_float(weight[c]));
    }
  }
  if (lane == 0) {
    if (mean != nullptr) mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm)), dnorm = dout * weight
// (kRms: mean null, read as 0, and no mean_c(dnorm) term).
template <typename T, bool kRms>
__global__ void layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp,
                                               const T* weight, const float* mean,
                                               const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const T* dy = dout + row * C;
  const T* x = inp + row * C;
  T* dx = dinp + row * C;
  const float m = kRms ? 0.f : mean[row];
  const float s = rstd[row];
  float dnorm_sum = 0.f;
  float dnorm_norm_sum = 0.f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float norm = (to_float(x[c]) - m) * s;
    const float dnorm = to_float(weight[c]) * to_float(dy[c]);
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = kRms ? 0.f : warp_sum(dnorm_sum) / C;
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;
  for (int c = lane; c < C; c += kWarpSize) {
    const float norm = (to_float(x[c]) - m) * s;
    const float dnorm = to_float(weight[c]) * to_float(dy[c]);
    dx[c] = from_float<T>(to_float(dx[c]) + s * (dnorm - dnorm_mean - norm * dnorm_norm_mean));
  }
}

// ---- deterministic column sums (weight and bias gradients) -----------------------------------
// sums[c] = sum over n of x[n,c] (and, with kNorm, normed[c] = sum of x[n,c] * norm[n,c] where
// norm = (inp - mean) * rstd: LayerNorm's dweight; mean null: RMSNorm's, inp * rstd). Pass 1: block
// (cx, split) sums rows [split * split_rows, ...) of 32 columns with 32 x 8 threads, then across
// its 8 row-phases in a fixed order, into partials[split][c]. Pass 2 adds the splits in order. No
// atomics.

constexpr int kColumns = 32;
constexpr int kRowPhases = 8;
constexpr int kMinSplitRows = 64;
constexpr int64_t kMaxPartials = int64_t{4} << 20;  // partial sums per output, floats (16 MB)

// Rows per split: 64, or more when C is so wide that the partials would pass kMaxPartials. A
// function of (N, C) alone, so the order of the sums never depends on the device.
int column_split_rows(int N, int C) {
  const int64_t max_splits = std::min<int64_t>(65535, std::max<int64_t>(1, kMaxPartials / C));
  const int64_t splits = std::min<int64_t>(ceil_div(N, kMinSplitRows), max_splits);
  return static_cast<int>(ceil_div(N, splits));
}

template <typename T, bool kNorm>
__global__ void column_sums_partial_kernel(float* partial_sums, float* partial_normed, const T* x,
                                           const T* inp, const float* mean, const float* rstd,
                                           int N, int C, int split_rows) {
  __shared__ float shared_sums[kRowPhases][kColumns];
  __shared__ float shared_normed[kRowPhases][kColumns];
  const int c = blockIdx.x * kColumns + threadIdx.x;
  const int split = blockIdx.y;
  const int end = min(N, (split + 1) * split_rows);
  float sum = 0.f;
  float normed = 0.f;
  if (c < C) {
    for (int n = split * split_rows + threadIdx.y; n < end; n += kRowPhases) {
      const int64_t i = static_cast<int64_t>(n) * C + c;
      const float v = to_float(x[i]);
      sum += v;
      if constexpr (kNorm) {
        normed += v * (to_float(inp[i]) - (mean != nullptr ? mean[n] : 0.f)) * rstd[n];
      }
    }
  }
  shared_sums[threadIdx.y][threadIdx.x] = sum;
  shared_normed[threadIdx.y][threadIdx.x] = normed;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = 0.f;
    float total_normed = 0.f;
    for (int p = 0; p < kRowPhases; ++p) {
      total += shared_sums[p][threadIdx.x];
      total_normed += shared_normed[p][threadIdx.x];
    }
    partial_sums[static_cast<int64_t>(split) * C + c] = total;
    if constexpr (kNorm) partial_normed[static_cast<int64_t>(split) * C + c] = total_normed;
  }
}

// Pass 2: block (cx) of kColumns x kFinishPhases threads; phase p adds splits p, p + 32, ... in
// order, then thread row 0 adds the phases' totals in phase order. One thread per column looping
// over every split (the first version) took 512 dependent L2 reads per column at N = 32768 on
// 3 blocks: most of a GPT-2 124M LayerNorm backward's time on the H200 (2026-12-04).
constexpr int kFinishPhases = 32;

__global__ void column_sums_finish_kernel(float* sums, float* normed, const float* partial_sums,
                                          const float* partial_normed, int splits, int C) {
  __shared__ float shared_sums[kFinishPhases][kColumns];
  __shared__ float shared_normed[kFinishPhases][kColumns];
  const int c = blockIdx.x * kColumns + threadIdx.x;
  float sum = 0.f;
  float norm = 0.f;
  if (c < C) {
    for (int s = threadIdx.y; s < splits; s += kFinishPhases) {
      const int64_t i = static_cast<int64_t>(s) * C + c;
      if (sums != nullptr) sum += partial_sums[i];
      if (normed != nullptr) norm += partial_normed[i];
    }
  }
  shared_sums[threadIdx.y][threadIdx.x] = sum;
  shared_normed[threadIdx.y][threadIdx.x] = norm;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float total = 0.f;
  float total_normed = 0.f;
  for (int p = 0; p < kFinishPhases; ++p) {
    total += shared_sums[p][threadIdx.x];
    total_normed += shared_normed[p][threadIdx.x];
  }
  if (sums != nullptr) sums[c] += total;
  if (normed != nullptr) normed[c] += total_normed;
}

void launch_column_sums_finish(Context& ctx, float* sums, float* normed, const float* partial_sums,
                               const float* partial_normed, int splits, int C) {
  column_sums_finish_kernel<<<static_cast<unsigned>(ceil_div(C, kColumns)),
                              dim3(kColumns, kFinishPhases), 0, ctx.stream()>>>(
      sums, normed, partial_sums, partial_normed, splits, C);
  WEFT_CUDA_CHECK_LAUNCH();
}

// sums[C] += column sums of x[N,C]; with inp/mean/rstd also normed[C] += sum x * norm.
template <typename T, bool kNorm>
void launch_column_sums_impl(Context& ctx, float* sums, float* normed, const T* x, const T* inp,
                             const float* mean, const float* rstd, int N, int C) {
  if (N == 0 || (sums == nullptr && normed == nullptr)) return;
  const int split_rows = column_split_rows(N, C);
  const int splits = static_cast<int>(ceil_div(N, split_rows));
  const size_t partial = static_cast<size_t>(splits) * C;
  auto* partials = static_cast<float*>(ctx.scratch((kNorm ? 2 : 1) * partial * sizeof(float)));
  const dim3 grid(static_cast<unsigned>(ceil_div(C, kColumns)), static_cast<unsigned>(splits));
  const dim3 block(kColumns, kRowPhases);
  column_sums_partial_kernel<device_t<T>, kNorm><<<grid, block, 0, ctx.stream()>>>(
      partials, partials + (kNorm ? partial : 0), dev(x), dev(inp), mean, rstd, N, C, split_rows);
  WEFT_CUDA_CHECK_LAUNCH();
  launch_column_sums_finish(ctx, sums, normed, partials, partials + (kNorm ? partial : 0), splits,
                            C);
}

void check_layernorm_dims(int N, int C) {
  WEFT_CHECK(N >= 0 && C > 0, "LayerNorm with N=", N, " C=", C);
}

// RMSNorm takes no mean and no bias (as the host's, ops.inc): one check for every backend's
// arguments. `bias` is the forward's bias or the backward's dbias.
void check_norm_args(const float* mean, const void* bias, Norm norm) {
  WEFT_CHECK(!norm.rms || (mean == nullptr && bias == nullptr), "RMSNorm has no mean or bias");
}

template <typename T>
void launch_layernorm_forward(T* out, float* mean, float* rstd, T* residual, const T* a, const T* b,
                              const T* weight, const T* bias, int N, int C, Norm norm,
                              Stream stream) {
  check_layernorm_dims(N, C);
  check_norm_args(mean, bias, norm);
  if (N == 0) return;
  const unsigned blocks = static_cast<unsigned>(ceil_div(N, kRowsPerBlock));
  if (residual != nullptr) {
    layernorm_forward_kernel<device_t<T>, true><<<blocks, kRowsPerBlock * kWarpSize, 0, stream>>>(
        dev(out), mean, rstd, dev(residual), dev(a), dev(b), dev(weight), dev(bias), N, C, norm);
  } else {
    layernorm_forward_kernel<device_t<T>, false><<<blocks, kRowsPerBlock * kWarpSize, 0, stream>>>(
        dev(out), mean, rstd, nullptr, dev(a), nullptr, dev(weight), dev(bias), N, C, norm);
  }
  WEFT_CUDA_CHECK_LAUNCH();
}

// ---- LayerNorm backward, fused --------------------------------------------------------------
// One pass over the rows for dinp and the weight and bias gradients (llm.c's layernorm_backward,
// made deterministic): 16-byte accesses (8 bf16 per lane), a warp per row, and each warp's own
// shared-memory sums of dout * norm and dout over its rows, in row order; the block adds its warps'
// sums in warp order into partials[block][C], and column_sums_finish_kernel adds the blocks in
// order. The row groups are a function of N alone, so the bits never depend on the device. Needs C
// a multiple of the vector width, 16-byte aligned rows and 2 * kLnWarps * C floats of shared
// memory; otherwise the two-kernel path above (dinp, then column sums) runs. Both are compiled
// per norm (kRms), so LayerNorm's code is what it was before RMSNorm joined it (a run-time flag
// cost the fused kernel 8 registers).

constexpr int kLnWarps = 4;                  // warps per block
constexpr int kLnMaxBlocks = 1024;           // row groups at most
constexpr size_t kLnMaxShared = 227 * 1024;  // Hopper's opt-in limit per block

// Rows per block: at least one per warp, at most kLnMaxBlocks blocks.
int layernorm_rows_per_block(int N) {
  const int64_t blocks = std::min<int64_t>(kLnMaxBlocks, ceil_div(N, kLnWarps));
  return static_cast<int>(ceil_div(N, blocks));
}

template <typename T, bool kRms>
__global__ void __launch_bounds__(kLnWarps* kWarpSize)
    layernorm_backward_fused_kernel(T* dinp, float* partial_dweight, float* partial_dbias,
                                    const T* dout, const T* inp, const T* weight, const float* mean,
                                    const float* rstd, int N, int C, int rows_per_block) {
  constexpr int kV = Pack<T>::kN;
  // [kLnWarps][2][C]: each warp's dweight, dbias sums, column v * kV + k at k * vecs + v (the
  // lanes of a warp update consecutive words: no bank conflicts)
  extern __shared__ float ln_shared[];
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  float* dw = ln_shared + static_cast<int64_t>(2 * warp) * C;
  float* db = dw + C;
  for (int c = lane; c < C; c += kWarpSize) {
    dw[c] = 0.f;
    db[c] = 0.f;
  }
  __syncwarp();  // the lanes below own other columns than the ones they zeroed
  const int vecs = C / kV;
  const int first = static_cast<int>(blockIdx.x) * rows_per_block;
  const int row_end = min(N, first + rows_per_block);
  for (int row = first + warp; row < row_end; row += kLnWarps) {
    const int64_t off = static_cast<int64_t>(row) * C;
    const float m = kRms ? 0.f : mean[row];
    const float s = rstd[row];
    float dnorm_sum = 0.f;
    float dnorm_norm_sum = 0.f;
    for (int v = lane; v < vecs; v += kWarpSize) {
      const Pack<T> x = load_pack(inp + off + v * kV);
      const Pack<T> dy = load_pack(dout + off + v * kV);
      const Pack<T> w = load_pack(weight + v * kV);
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const float norm = (to_float(x.v[k]) - m) * s;
        const float dnorm = to_float(w.v[k]) * to_float(dy.v[k]);
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * norm;
      }
    }
    const float dnorm_mean = kRms ? 0.f : warp_sum(dnorm_sum) / C;
    const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;
    for (int v = lane; v < vecs; v += kWarpSize) {
      const Pack<T> x = load_pack(inp + off + v * kV);
      const Pack<T> dy = load_pack(dout + off + v * kV);
      const Pack<T> w = load_pack(weight + v * kV);
      Pack<T> dx = load_pack(dinp + off + v * kV);
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const float norm = (to_float(x.v[k]) - m) * s;
        const float g = to_float(dy.v[k]);
        const float dnorm = to_float(w.v[k]) * g;
        dx.v[k] =
            from_float<T>(to_float(dx.v[k]) + s * (dnorm - dnorm_mean - norm * dnorm_norm_mean));
        dw[k * vecs + v] += g * norm;
        db[k * vecs + v] += g;
      }
      *reinterpret_cast<Pack<T>*>(dinp + off + v * kV) = dx;
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int at = (c % kV) * vecs + c / kV;
    float w_sum = 0.f;
    float b_sum = 0.f;
    for (int w = 0; w < kLnWarps; ++w) {
      w_sum += ln_shared[static_cast<int64_t>(2 * w) * C + at];
      b_sum += ln_shared[static_cast<int64_t>(2 * w + 1) * C + at];
    }
    partial_dweight[static_cast<int64_t>(blockIdx.x) * C + c] = w_sum;
    partial_dbias[static_cast<int64_t>(blockIdx.x) * C + c] = b_sum;
  }
}

// dbias may be null (no bias; always under RMSNorm): its partial sums are formed and not added.
template <typename T>
void launch_layernorm_backward(Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                               const T* inp, const T* weight, const float* mean, const float* rstd,
                               int N, int C, Norm norm) {
  check_layernorm_dims(N, C);
  check_norm_args(mean, dbias, norm);
  if (N == 0) return;
  constexpr int kV = Pack<device_t<T>>::kN;
  const size_t shared = size_t{2} * kLnWarps * C * sizeof(float);
  const int rows = layernorm_rows_per_block(N);
  const int blocks = static_cast<int>(ceil_div(N, rows));
  const size_t partial = static_cast<size_t>(blocks) * C;
  if (C % kV == 0 && shared <= kLnMaxShared && aligned16(dinp) && aligned16(dout) &&
      aligned16(inp) && aligned16(weight) && 2 * partial * sizeof(float) <= ctx.scratch_bytes()) {
    auto* partials = static_cast<float*>(ctx.scratch(2 * partial * sizeof(float)));
    const auto kernel = norm.rms ? layernorm_backward_fused_kernel<device_t<T>, true>
                                 : layernorm_backward_fused_kernel<device_t<T>, false>;
    // Set for the current device at every launch (cheap), never once per process: a process that
    // drives a second GPU needs it there too.
    if (shared > 48 * 1024) {
      WEFT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared)));
    }
    kernel<<<static_cast<unsigned>(blocks), kLnWarps * kWarpSize, shared, ctx.stream()>>>(
        dev(dinp), partials, partials + partial, dev(dout), dev(inp), dev(weight), mean, rstd, N, C,
        rows);
    WEFT_CUDA_CHECK_LAUNCH();
    if (dweight != nullptr || dbias != nullptr) {
      launch_column_sums_finish(ctx, dbias, dweight, partials + partial, partials, blocks, C);
    }
    return;
  }
  const auto dinp_kernel = norm.rms ? layernorm_backward_dinp_kernel<device_t<T>, true>
                                    : layernorm_backward_dinp_kernel<device_t<T>, false>;
  dinp_kernel<<<static_cast<unsigned>(ceil_div(N, kRowsPerBlock)), kRowsPerBlock * kWarpSize, 0,
                ctx.stream()>>>(dev(dinp), dev(dout), dev(inp), dev(weight), mean, rstd, N, C);
  WEFT_CUDA_CHECK_LAUNCH();
  launch_column_sums_impl<T, true>(ctx, dbias, dweight, dout, inp, norm.rms ? nullptr : mean, rstd,
                                   N, C);
}

// ---- GeLU, residual, bias ---------------------------------------------------------------------

// dinp = dout * gelu'(inp) (written, ops.inc's rule). In place (dout == dinp) is fine: each
// element is read before it is written by the same thread.
template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  WEFT_GRID_STRIDE(i, n) {
    dinp[i] = from_float<T>(gelu_grad(to_float(inp[i])) * to_float(dout[i]));
  }
}

template <typename T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, int64_t n) {
  WEFT_GRID_STRIDE(i, n) { out[i] = from_float<T>(to_float(a[i]) + to_float(b[i])); }
}

template <typename T>
void launch_residual_forward(T* out, const T* a, const T* b, int64_t n, Stream stream) {
  WEFT_CHECK(n >= 0, "negative element count ", n);
  if (n == 0) return;
  residual_forward_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
      dev(out), dev(a), dev(b), n);
  WEFT_CUDA_CHECK_LAUNCH();
}

// x = pre (or out) [N,OC]; x += bias; with pre: out = gelu(x).
template <typename T>
__global__ void bias_gelu_kernel(T* out, T* pre, const T* bias, int OC, int64_t n) {
  WEFT_GRID_STRIDE(i, n) {
    T* x = pre != nullptr ? pre : out;
    float v = to_float(x[i]);
    if (bias != nullptr) {
      v += to_float(bias[i % OC]);
      x[i] = from_float<T>(v);
      v = to_float(x[i]);  // the rounded value, as the epilogue's aux output would hold
    }
    if (pre != nullptr) out[i] = from_float<T>(gelu(v));
  }
}

// ---- SwiGLU ----------------------------------------------------------------------------------
// inp[N,2F] = [gate | up] per row; element i of out[N,F] reads the pair at row i / F, column
// i % F. The host twin (cpu/host_bf16.cc) evaluates the same expressions in the same order.

// out = silu(g) * u, silu(g) = g / (1 + exp(-g)), rounded once.
template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int F, int64_t n) {
  WEFT_GRID_STRIDE(i, n) {
    const int64_t at = (i / F) * 2 * F + i % F;
    const float g = to_float(inp[at]), u = to_float(inp[at + F]);
    out[i] = from_float<T>(g / (1.f + expf(-g)) * u);
  }
}

// dg = dout * u * sig * (1 + g (1 - sig)), du = dout * g * sig (written); the fma written out so
// that the host's compiler cannot contract it differently.
template <typename T>
__global__ void swiglu_backward_kernel(T* dinp, const T* dout, const T* inp, int F, int64_t n) {
  WEFT_GRID_STRIDE(i, n) {
    const int64_t at = (i / F) * 2 * F + i % F;
    const float g = to_float(inp[at]), u = to_float(inp[at + F]), dy = to_float(dout[i]);
    const float sig = 1.f / (1.f + expf(-g));
    dinp[at] = from_float<T>(dy * u * sig * fmaf(g, 1.f - sig, 1.f));
    dinp[at + F] = from_float<T>(dy * g * sig);
  }
}

void check_swiglu_dims(int N, int F) { WEFT_CHECK(N >= 0 && F > 0, "SwiGLU with N=", N, " F=", F); }

// ---- rotary position embedding ------------------------------------------------------------------
// In place on the q and k heads of qkv[B,T,(NH+2*NKV)*HS] (backend.h, Backend::rope). Block
// (t, y) handles position t of batch rows [y * kRopeRows, ...): it first puts the cos and sin of
// the position's HS/2 angles in shared memory, t * inv_freq[i] in double (inv_freq from the host,
// rope_inv_freq: the host twin's values) and rounded to float, then rotates every pair of its
// rows' NH + NKV heads: x1' = fma(x1, c, -(x2 s)), x2' = fma(x2, c, x1 s), rounded once. The
// angles cost one double sincos per (position, pair, block), shared by kRopeRows rows.

constexpr int kRopeMaxHalf = 256;  // HS <= 512: the frequencies travel as a kernel parameter
constexpr int kRopeRows = 4;
constexpr int kRopeThreads = 256;

struct RopeFrequencies {
  double inv_freq[kRopeMaxHalf];  // theta^(-2i/HS), i < HS/2
};

template <typename T>
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(T* qkv, int B, int T_, int heads, int half, int64_t W,
                const __grid_constant__ RopeFrequencies f, bool inverse) {
  __shared__ float cs[2 * kRopeMaxHalf];  // [half, {cos, sin}]
  const int t = blockIdx.x;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    double sn, c;
    sincos(t * f.inv_freq[i], &sn, &c);
    const float s = static_cast<float>(sn);
    cs[2 * i] = static_cast<float>(c);
    cs[2 * i + 1] = inverse ? -s : s;
  }
  __syncthreads();
  const int HS = 2 * half;
  const int pairs = heads * half;
  const int b_end = min(B, static_cast<int>(blockIdx.y + 1) * kRopeRows);
  for (int b = blockIdx.y * kRopeRows; b < b_end; ++b) {
    T* row = qkv + (static_cast<int64_t>(b) * T_ + t) * W;  // [W]
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
      const int i = p % half;
      T* x = row + (p / half) * HS + i;  // element i of head p / half; its pair is x[half]
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float x1 = to_float(x[0]), x2 = to_float(x[half]);
      x[0] = from_float<T>(fmaf(x1, c, -(x2 * s)));
      x[half] = from_float<T>(fmaf(x2, c, x1 * s));
    }
  }
}

template <typename T>
void launch_rope(T* qkv, int B, int T_, int NH, int NKV, int HS, float theta, bool inverse,
                 Stream stream) {
  WEFT_CHECK(B >= 0 && T_ >= 0 && NH > 0 && NKV > 0 && HS > 0 && HS % 2 == 0,
             "rotary embedding with B=", B, " T=", T_, " NH=", NH, " NKV=", NKV, " HS=", HS,
             " (HS must be even)");
  WEFT_CHECK(HS / 2 <= kRopeMaxHalf, "the CUDA rotary embedding takes head sizes up to ",
             2 * kRopeMaxHalf, ", got ", HS);
  if (B == 0 || T_ == 0) return;
  const int64_t row_blocks = ceil_div(B, kRopeRows);
  WEFT_CHECK(row_blocks <= 65535, "rotary embedding: B=", B, " exceeds the grid");
  RopeFrequencies f{};
  for (int i = 0; i < HS / 2; ++i) f.inv_freq[i] = rope_inv_freq(theta, i, HS);
  const dim3 grid(static_cast<unsigned>(T_), static_cast<unsigned>(row_blocks));
  rope_kernel<<<grid, kRopeThreads, 0, stream>>>(
      dev(qkv), B, T_, NH + NKV, HS / 2, static_cast<int64_t>(NH + 2 * NKV) * HS, f, inverse);
  WEFT_CUDA_CHECK_LAUNCH();
}

// ---- fused softmax + cross-entropy ------------------------------------------------------------
// One block per row. Pass 1: each thread keeps a running (max, sum of exp(z - max)) over its
// columns, rescaling the sum when the max grows (the online softmax of Milakov & Gimelshein 2018);
// the block then combines the pairs. Pass 2 overwrites the row with the gradient.

constexpr int kSoftmaxThreads = 512;

// The (max, sum) pair's combine: vocab_parallel_ce.h's, shared with the host.
__device__ __forceinline__ void combine_max_sum(float& m, float& s, float m2, float s2) {
  vocab_ce::fold(m, s, m2, s2);
}

// Every thread's running (m, s) pair combined over its warp, then the warps' pairs in warp order;
// every thread gets the block's. Call from every thread of a kSoftmaxThreads block.
__device__ __forceinline__ void combine_block_max_sum(float& m, float& s) {
  __shared__ float shared_m[kSoftmaxThreads / kWarpSize];
  __shared__ float shared_s[kSoftmaxThreads / kWarpSize];
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(kFullMask, m, offset);
    const float s2 = __shfl_xor_sync(kFullMask, s, offset);
    combine_max_sum(m, s, m2, s2);
  }
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  if (lane == 0) {
    shared_m[warp] = m;
    shared_s[warp] = s;
  }
  __syncthreads();
  m = -INFINITY;
  s = 0.f;
  for (int w = 0; w < static_cast<int>(blockDim.x) / kWarpSize; ++w) {
    combine_max_sum(m, s, shared_m[w], shared_s[w]);
  }
}

// Pass 1 over z[0, n): (m, s) = the max and the sum of exp(z - m), each thread's running pair
// combined over its warp, then the warps' pairs in warp order; every thread gets the result. Call
// from every thread of a kSoftmaxThreads block.
template <typename T>
__device__ void block_max_sum(const T* z, int n, float& m, float& s) {
  m = -INFINITY;
  s = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float x = to_float(z[j]);
    if (x > m) {
      s = (m == -INFINITY ? 0.f : s * expf(m - x)) + 1.f;
      m = x;
    } else {
      s += expf(x - m);
    }
  }
  combine_block_max_sum(m, s);
}

// block_max_sum over whole 16-byte packs: z 16-byte aligned, n_packs * kN elements of which the
// first n count (the rest are padding). Per pack one rescale at most: the pack's max first, then
// its exponentials against the running max.
template <typename T>
__device__ void block_max_sum_packed(const T* z, int n, int n_packs, float& m, float& s) {
  constexpr int kV = Pack<T>::kN;
  m = -INFINITY;
  s = 0.f;
  for (int p = threadIdx.x; p < n_packs; p += blockDim.x) {
    const Pack<T> x = load_pack(z + static_cast<int64_t>(p) * kV);
    const int j0 = p * kV;
    float pm = -INFINITY;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      if (j0 + k < n) pm = fmaxf(pm, to_float(x.v[k]));
    }
    if (pm > m) {  // fmaxf skips NaN: a NaN logit reaches s below, as in block_max_sum
      s = m == -INFINITY ? 0.f : s * expf(m - pm);
      m = pm;
    }
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      if (j0 + k < n) s += expf(to_float(x.v[k]) - m);
    }
  }
  combine_block_max_sum(m, s);
}

// One block per row. kPacked: over 16-byte packs (Vp a multiple of the pack, rows aligned), a
// quarter of the memory instructions; the same loss and gradient expressions either way.
template <typename T, bool kPacked>
__global__ void softmax_cross_entropy_kernel(float* losses, T* logits, const int32_t* targets,
                                             float dloss, int V, int Vp) {
  constexpr int kV = Pack<T>::kN;
  __shared__ float shared_zy;
  const int64_t row = blockIdx.x;
  T* z = logits + row * Vp;
  const int32_t y = targets[row];
  if (y < 0 || y >= V) {  // ignored row: loss 0, gradient 0; bad target: NaN (visible)
    const float fill = y < 0 ? 0.f : NAN;
    if (threadIdx.x == 0) losses[row] = fill;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) z[j] = from_float<T>(j < V ? fill : 0.f);
    return;
  }
  if (threadIdx.x == 0) shared_zy = to_float(z[y]);  // read before pass 2 overwrites it
  float m, s;
  // Their barrier also publishes shared_zy.
  if constexpr (kPacked) {
    block_max_sum_packed(z, V, Vp / kV, m, s);
  } else {
    block_max_sum(z, V, m, s);
  }
  if (threadIdx.x == 0) losses[row] = (m - shared_zy) + logf(s);
  const float inv_s = 1.f / s;
  const auto grad = [&](float x, int j) {
    return j < V ? dloss * (expf(x - m) * inv_s - (j == y ? 1.f : 0.f)) : 0.f;
  };
  if constexpr (kPacked) {
    for (int p = threadIdx.x; p < Vp / kV; p += blockDim.x) {
      Pack<T> x = load_pack(z + static_cast<int64_t>(p) * kV);
#pragma unroll
      for (int k = 0; k < kV; ++k) x.v[k] = from_float<T>(grad(to_float(x.v[k]), p * kV + k));
      *reinterpret_cast<Pack<T>*>(z + static_cast<int64_t>(p) * kV) = x;
    }
  } else {
    for (int j = threadIdx.x; j < Vp; j += blockDim.x)
      z[j] = from_float<T>(grad(to_float(z[j]), j));
  }
}

template <typename T>
void launch_softmax_cross_entropy(float* losses, T* logits, const int32_t* targets, float dloss,
                                  int N, int V, int Vp, Stream stream) {
  WEFT_CHECK(N >= 0 && V > 0 && Vp >= V, "softmax cross-entropy with N=", N, " V=", V, " Vp=", Vp);
  if (N == 0) return;
  if (Vp % Pack<device_t<T>>::kN == 0 && aligned16(logits)) {
    softmax_cross_entropy_kernel<device_t<T>, true>
        <<<N, kSoftmaxThreads, 0, stream>>>(losses, dev(logits), targets, dloss, V, Vp);
  } else {
    softmax_cross_entropy_kernel<device_t<T>, false>
        <<<N, kSoftmaxThreads, 0, stream>>>(losses, dev(logits), targets, dloss, V, Vp);
  }
  WEFT_CUDA_CHECK_LAUNCH();
}

// ---- vocabulary-parallel cross-entropy (Megatron-LM) -----------------------------------------
// A rank holds columns [v0, v0 + Vl) of the padded vocabulary, the first Vv of them real. One
// block per row, as softmax_cross_entropy_kernel; row offsets in int64 (N * Vl may pass 2^31).

// stats[row] = {m, s, z_y}: the online max and sum of exp(x - m) over the Vv real columns
// (m = -inf, s = 0 when Vv = 0), and the target's logit when this rank holds it (else 0).
// kPacked: over 16-byte packs, in softmax_cross_entropy_kernel's packed order, so that one shard
// (tp = 1) gives softmax_cross_entropy's bits on the same launch condition.
template <typename T, bool kPacked>
__global__ void cross_entropy_shard_stats_kernel(float* stats, const T* logits,
                                                 const int32_t* targets, int Vl, int Vv, int v0) {
  const int64_t row = blockIdx.x;
  const T* z = logits + row * Vl;
  float m, s;
  if constexpr (kPacked) {
    block_max_sum_packed(z, Vv, Vl / Pack<T>::kN, m, s);
  } else {
    block_max_sum(z, Vv, m, s);
  }
  if (threadIdx.x != 0) return;
  const int64_t y = static_cast<int64_t>(targets[row]) - v0;
  float* out = stats + row * 3;
  out[0] = m;
  out[1] = s;
  out[2] = y >= 0 && y < Vv ? to_float(z[y]) : 0.f;
}

// From all_stats[tp,N,3]: vocab_ce::totals (M = max_r m_r, then S = sum_r s_r exp(m_r - M) in
// rank order, z_y = sum_r z_y,r), the loss and the gradient in the real columns with
// vocab_ce::loss and vocab_ce::grad: the host's arithmetic (vocab_parallel_ce.h), and
// softmax_cross_entropy_kernel's expressions with (M, S) for its (m, s). Every thread combines the
// tp triples itself (tp is small), so no shared memory or barrier is needed.
template <typename T>
__global__ void cross_entropy_shard_finish_kernel(float* losses, T* logits, const float* all_stats,
                                                  int tp, const int32_t* targets, float dloss,
                                                  int N, int V, int Vl, int Vv, int v0) {
  const int64_t row = blockIdx.x;
  T* z = logits + row * Vl;
  const int32_t y = targets[row];
  if (y < 0 || y >= V) {  // ignored row: loss 0, gradient 0; bad target: NaN (visible)
    const float fill = y < 0 ? 0.f : NAN;
    if (threadIdx.x == 0) losses[row] = fill;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) z[j] = from_float<T>(j < Vv ? fill : 0.f);
    return;
  }
  const vocab_ce::Totals t = vocab_ce::totals(all_stats + row * vocab_ce::kStats,
                                              static_cast<int64_t>(N) * vocab_ce::kStats, tp);
  if (threadIdx.x == 0) losses[row] = vocab_ce::loss(t);
  const float inv_s = 1.f / t.sum;
  const int64_t local_y = static_cast<int64_t>(y) - v0;
  for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
    float g = 0.f;
    if (j < Vv) g = vocab_ce::grad(to_float(z[j]), t.max, inv_s, dloss, j == local_y);
    z[j] = from_float<T>(g);
  }
}

void check_cross_entropy_shard(int N, int Vl, int Vv, int v0) {
  WEFT_CHECK(N >= 0 && Vl > 0 && Vv >= 0 && Vv <= Vl && v0 >= 0,
             "vocabulary-parallel cross-entropy with N=", N, " Vl=", Vl, " Vv=", Vv, " v0=", v0);
}

template <typename T>
void launch_cross_entropy_shard_stats(float* stats, const T* logits, const int32_t* targets, int N,
                                      int Vl, int Vv, int v0, Stream stream) {
  check_cross_entropy_shard(N, Vl, Vv, v0);
  if (N == 0) return;
  if (Vl % Pack<device_t<T>>::kN == 0 && aligned16(logits)) {  // as launch_softmax_cross_entropy
    cross_entropy_shard_stats_kernel<device_t<T>, true>
        <<<N, kSoftmaxThreads, 0, stream>>>(stats, dev(logits), targets, Vl, Vv, v0);
  } else {
    cross_entropy_shard_stats_kernel<device_t<T>, false>
        <<<N, kSoftmaxThreads, 0, stream>>>(stats, dev(logits), targets, Vl, Vv, v0);
  }
  WEFT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_cross_entropy_shard_finish(float* losses, T* logits, const float* all_stats, int tp,
                                       const int32_t* targets, float dloss, int N, int V, int Vl,
                                       int Vv, int v0, Stream stream) {
  check_cross_entropy_shard(N, Vl, Vv, v0);
  WEFT_CHECK(tp >= 1 && V > 0 && Vv == std::clamp(V - v0, 0, Vl),
             "vocabulary-parallel cross-entropy with tp=", tp, " V=", V, " v0=", v0, " Vl=", Vl,
             " Vv=", Vv, " (Vv must be max(0, min(Vl, V - v0)))");
  if (N == 0) return;
  cross_entropy_shard_finish_kernel<device_t<T>><<<N, kSoftmaxThreads, 0, stream>>>(
      losses, dev(logits), all_stats, tp, targets, dloss, N, V, Vl, Vv, v0);
  WEFT_CUDA_CHECK_LAUNCH();
}

// ---- AdamW ------------------------------------------------------------------------------------

struct AdamWScalars {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float correction1;  // 1 - beta1^t
  float correction2;  // 1 - beta2^t
  float grad_scale;
};

// One element, exactly as ref::adamw_update.
__device__ __forceinline__ float adamw_element(float& p, float g, float& m, float& v, float wd,
                                               const AdamWScalars& s) {
  m = s.beta1 * m + (1.f - s.beta1) * g;
  v = s.beta2 * v + (1.f - s.beta2) * g * g;
  const float mhat = m / s.correction1;
  const float vhat = v / s.correction2;
  p -= s.lr * (mhat / (sqrtf(vhat) + s.eps) + wd * p);
  return p;
}

AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, int t, float grad_scale) {
  WEFT_CHECK(t >= 1, "AdamW step t=", t, " must be >= 1");
  // As the fp32 reference: powers in float.
  return AdamWScalars{lr,
                      beta1,
                      beta2,
                      eps,
                      1.f - std::pow(beta1, static_cast<float>(t)),
                      1.f - std::pow(beta2, static_cast<float>(t)),
                      grad_scale};
}

// Block i updates chunk i of the table (host_plans.h: make_chunks).
__global__ void adamw_multi_kernel(const AdamWSegment* segments, const Chunk* chunks,
                                   int64_t chunk_size, AdamWScalars s) {
  const Chunk chunk = chunks[blockIdx.x];
  const AdamWSegment seg = segments[chunk.segment];
  auto* params16 = dev(seg.params16);
  const int64_t end = min(chunk.offset + chunk_size, seg.n);
  for (int64_t i = chunk.offset + threadIdx.x; i < end; i += blockDim.x) {
    float p = seg.params[i];
    float mi = seg.m[i];
    float vi = seg.v[i];
    adamw_element(p, seg.grads[i] * s.grad_scale, mi, vi, seg.weight_decay, s);
    seg.params[i] = p;
    seg.m[i] = mi;
    seg.v[i] = vi;
    if (params16 != nullptr) params16[i] = from_float<device_t<BF16>>(p);
  }
}

// ---- reductions -------------------------------------------------------------------------------
// Sum of squares in double: a fixed grid (a function of n only) of per-thread sums, a fixed tree
// per block, then one block adds the partials in order. The same bits on every run and device.

constexpr int kReduceThreads = 256;
constexpr int kReduceMaxBlocks = 1024;

__device__ double block_sum_double(double x, double* shared) {
  shared[threadIdx.x] = x;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  return shared[0];
}

__global__ void sum_squares_partial_kernel(double* partials, const float* x, int64_t n) {
  __shared__ double shared[kReduceThreads];
  double acc = 0.0;
  WEFT_GRID_STRIDE(i, n) {
    const double xi = x[i];
    acc += xi * xi;
  }
  const double total = block_sum_double(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void sum_squares_finish_kernel(double* out, const double* partials, int count) {
  __shared__ double shared[kReduceThreads];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  const double total = block_sum_double(acc, shared);
  if (threadIdx.x == 0) *out = total;
}

void launch_sum_squares(Context& ctx, double* out, const float* x, int64_t n) {
  WEFT_CHECK(n >= 0, "negative element count ", n);
  const int64_t wanted = ceil_div(n, kReduceThreads * 16);
  const int blocks =
      static_cast<int>(wanted < 1 ? 1 : (wanted > kReduceMaxBlocks ? kReduceMaxBlocks : wanted));
  auto* partials = static_cast<double*>(ctx.scratch(kReduceMaxBlocks * sizeof(double)));
  sum_squares_partial_kernel<<<blocks, kReduceThreads, 0, ctx.stream()>>>(partials, x, n);
  WEFT_CUDA_CHECK_LAUNCH();
  sum_squares_finish_kernel<<<1, kReduceThreads, 0, ctx.stream()>>>(out, partials, blocks);
  WEFT_CUDA_CHECK_LAUNCH();
}

// One block: a microbatch's losses (B*T of them) are too few to be worth a second pass.
__global__ void add_mean_kernel(double* sum, const float* x, int64_t n, double count) {
  __shared__ double shared[kReduceThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
  const double total = block_sum_double(acc, shared);
  if (threadIdx.x == 0) *sum += static_cast<double>(static_cast<float>(total / count));
}

}  // namespace

// ---- launchers for linear.cc (internal.h) ----------------------------------------------------

void launch_bias_gelu(BF16* out, BF16* pre, const BF16* bias, int N, int OC, Stream stream) {
  const int64_t n = static_cast<int64_t>(N) * OC;
  if (n == 0) return;
  bias_gelu_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(dev(out), dev(pre),
                                                                              dev(bias), OC, n);
  WEFT_CUDA_CHECK_LAUNCH();
}

void launch_gelu_backward_inplace(BF16* dinp, const BF16* pre, int64_t n, Stream stream) {
  if (n == 0) return;
  gelu_backward_kernel<device_t<BF16>><<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(
      dev(dinp), dev(pre), dev(dinp), n);
  WEFT_CUDA_CHECK_LAUNCH();
}

void launch_column_sums(Context& ctx, float* out, const BF16* x, int N, int C) {
  launch_column_sums_impl<BF16, false>(ctx, out, nullptr, x, nullptr, nullptr, nullptr, N, C);
}

}  // namespace detail

void convert(BF16* out, const float* in, int64_t n, Stream stream) {
  detail::launch_convert(out, in, n, stream);
}

void embedding_forward(BF16* out, const int32_t* tokens, const BF16* wte, const BF16* wpe, int B,
                       int T, int C, Stream stream) {
  detail::launch_embedding_forward(out, tokens, wte, wpe, B, T, C, stream);
}

void embedding_backward(Context& ctx, float* dwte, float* dwpe, const BF16* dout,
                        const int32_t* tokens_host, int B, int T, int C) {
  detail::launch_embedding_backward(ctx, dwte, dwpe, dout, tokens_host, B, T, C);
}

void embedding_forward_shard(BF16* out, const int32_t* tokens, const BF16* wte, const BF16* wpe,
                             int B, int T, int C, int v0, int Vl, Stream stream) {
  detail::launch_embedding_forward_shard(out, tokens, wte, wpe, B, T, C, v0, Vl, stream);
}

void embedding_backward_shard(Context& ctx, float* dwte, float* dwpe, const BF16* dout,
                              const int32_t* tokens_host, int B, int T, int C, int v0, int Vl) {
  detail::launch_embedding_backward_shard(ctx, dwte, dwpe, dout, tokens_host, B, T, C, v0, Vl);
}

void layernorm_forward(BF16* out, float* mean, float* rstd, const BF16* inp, const BF16* weight,
                       const BF16* bias, int N, int C, Norm norm, Stream stream) {
  detail::launch_layernorm_forward<BF16>(out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C,
                                         norm, stream);
}

void fused_residual_layernorm_forward(BF16* residual, BF16* out, float* mean, float* rstd,
                                      const BF16* a, const BF16* b, const BF16* weight,
                                      const BF16* bias, int N, int C, Norm norm, Stream stream) {
  WEFT_CHECK(residual != nullptr, "fused_residual_layernorm_forward needs a residual output");
  detail::launch_layernorm_forward(out, mean, rstd, residual, a, b, weight, bias, N, C, norm,
                                   stream);
}

void layernorm_backward(Context& ctx, BF16* dinp, float* dweight, float* dbias, const BF16* dout,
                        const BF16* inp, const BF16* weight, const float* mean, const float* rstd,
                        int N, int C, Norm norm) {
  detail::launch_layernorm_backward(ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                    norm);
}

void swiglu_forward(BF16* out, const BF16* inp, int N, int F, Stream stream) {
  detail::check_swiglu_dims(N, F);
  const int64_t n = static_cast<int64_t>(N) * F;
  if (n == 0) return;
  detail::swiglu_forward_kernel<<<detail::elementwise_blocks(n), detail::kElementwiseThreads, 0,
                                  stream>>>(detail::dev(out), detail::dev(inp), F, n);
  WEFT_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(BF16* dinp, const BF16* dout, const BF16* inp, int N, int F, Stream stream) {
  detail::check_swiglu_dims(N, F);
  const int64_t n = static_cast<int64_t>(N) * F;
  if (n == 0) return;
  detail::swiglu_backward_kernel<<<detail::elementwise_blocks(n), detail::kElementwiseThreads, 0,
                                   stream>>>(detail::dev(dinp), detail::dev(dout), detail::dev(inp),
                                             F, n);
  WEFT_CUDA_CHECK_LAUNCH();
}

void rope(BF16* qkv, int B, int T, int NH, int NKV, int HS, float theta, bool inverse,
          Stream stream) {
  detail::launch_rope(qkv, B, T, NH, NKV, HS, theta, inverse, stream);
}

void residual_forward(BF16* out, const BF16* a, const BF16* b, int64_t n, Stream stream) {
  detail::launch_residual_forward(out, a, b, n, stream);
}
void residual_forward(float* out, const float* a, const float* b, int64_t n, Stream stream) {
  detail::launch_residual_forward(out, a, b, n, stream);
}

void softmax_cross_entropy_fused(float* losses, BF16* logits, const int32_t* targets, float dloss,
                                 int N, int V, int Vp, Stream stream) {
  detail::launch_softmax_cross_entropy(losses, logits, targets, dloss, N, V, Vp, stream);
}

void cross_entropy_shard_stats(float* stats, const BF16* logits, const int32_t* targets, int N,
                               int Vl, int Vv, int v0, Stream stream) {
  detail::launch_cross_entropy_shard_stats(stats, logits, targets, N, Vl, Vv, v0, stream);
}

void cross_entropy_shard_finish(float* losses, BF16* logits, const float* all_stats, int tp,
                                const int32_t* targets, float dloss, int N, int V, int Vl, int Vv,
                                int v0, Stream stream) {
  detail::launch_cross_entropy_shard_finish(losses, logits, all_stats, tp, targets, dloss, N, V, Vl,
                                            Vv, v0, stream);
}

AdamWPlan::AdamWPlan(Arena& arena, std::span<const AdamWSegment> segments, AdamWCapacity capacity) {
  static_assert(
      sizeof(AdamWSegment) == kAdamWSegmentRecordBytes && sizeof(Chunk) == kAdamWChunkRecordBytes,
      "the memory model prices the AdamW tables by these record sizes (backend.h)");
  std::vector<int64_t> sizes;
  num_elements_ = 0;
  for (const AdamWSegment& s : segments) {
    WEFT_CHECK(s.params != nullptr && s.grads != nullptr && s.m != nullptr && s.v != nullptr,
               "AdamW segment ", sizes.size(), " has a null tensor");
    sizes.push_back(s.n);
    num_elements_ += s.n;
  }
  if (capacity.segments < 0) {
    capacity = {.segments = static_cast<int64_t>(segments.size()), .elements = num_elements_};
  }
  WEFT_CHECK(static_cast<int64_t>(segments.size()) <= capacity.segments &&
                 num_elements_ <= capacity.elements,
             "AdamW plan of ", segments.size(), " segments over ", num_elements_,
             " elements exceeds its capacity of ", capacity.segments, " over ", capacity.elements);
  const std::vector<Chunk> chunks = make_chunks(sizes, kChunk);
  num_chunks_ = static_cast<int64_t>(chunks.size());
  const AdamWTableBytes table = adamw_table_bytes(capacity);
  WEFT_CHECK(num_chunks_ * kAdamWChunkRecordBytes <= table.chunks, "AdamW plan: ", num_chunks_,
             " chunks exceed the table's ", table.chunks / kAdamWChunkRecordBytes);
  auto* device_segments =
      static_cast<AdamWSegment*>(arena.allocate(static_cast<size_t>(table.segments)));
  auto* device_chunks = static_cast<Chunk*>(arena.allocate(static_cast<size_t>(table.chunks)));
  copy_to_device(device_segments, segments.data(), segments.size() * sizeof(AdamWSegment));
  copy_to_device(device_chunks, chunks.data(), chunks.size() * sizeof(Chunk));
  // cudaMemcpy from pageable memory may return before its DMA lands, and a non-blocking stream
  // given to step() does not wait for the legacy stream it ran on.
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  segments_ = device_segments;
  chunks_ = device_chunks;
}

void AdamWPlan::step(float lr, float beta1, float beta2, float eps, int t, float grad_scale,
                     Stream stream) const {
  const detail::AdamWScalars s = detail::adamw_scalars(lr, beta1, beta2, eps, t, grad_scale);
  if (num_chunks_ == 0) return;
  detail::adamw_multi_kernel<<<static_cast<unsigned>(num_chunks_), 256, 0, stream>>>(
      segments_, static_cast<const Chunk*>(chunks_), kChunk, s);
  WEFT_CUDA_CHECK_LAUNCH();
}

void sum_squares(Context& ctx, double* out, const float* x, int64_t n) {
  detail::launch_sum_squares(ctx, out, x, n);
}

void add_mean(double* sum, const float* x, int64_t n, int64_t count, Stream stream) {
  WEFT_CHECK(n >= 0 && count > 0, "add_mean of ", n, " elements over ", count);
  detail::add_mean_kernel<<<1, detail::kReduceThreads, 0, stream>>>(sum, x, n,
                                                                    static_cast<double>(count));
  WEFT_CUDA_CHECK_LAUNCH();
}

}  // namespace weft::kernels::cuda
