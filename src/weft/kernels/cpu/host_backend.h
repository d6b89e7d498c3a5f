#pragma once
// What the two host backends (host_fp32.cc, host_bf16.cc) share: host memory handed out and
// counted as the CUDA arena hands it out and counts it, AdamW over segments with the arithmetic of
// cpu::adamw_update, the sum of squares of cpu::sum_squares, and the ops whose one expression
// serves both element types (read through to_float, written through from_float<A>: bf16 rounded
// once). Internal to kernels/cpu.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "weft/core/check.h"
#include "weft/core/clock.h"
#include "weft/core/dtype.h"
#include "weft/core/memory_usage.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/kernels.h"
#include "weft/kernels/vocab_parallel_ce.h"

namespace weft::kernels {

// The host BF16Mixed backend (make_host_backend's, for that precision).
std::unique_ptr<Backend> make_host_bf16_backend();

inline constexpr int64_t kHostAlignment = 256;  // what cuBLASLt prefers; the CUDA arena's default
// Element-wise loops on fewer elements than this stay on the calling thread.
inline constexpr int64_t kHostMinParallel = int64_t{1} << 15;

inline float to_float(float x) { return x; }
inline float to_float(BF16 x) { return x.to_float(); }
template <typename A>
A from_float(float x) {
  if constexpr (sizeof(A) == 4) {
    return x;
  } else {
    return BF16::from_float(x);
  }
}

// The host's rows of the vocabulary-parallel cross-entropy (kernels/vocab_parallel_ce.h).
namespace vocab_ce {

// Step 1 for one row z[0, Vv) of a rank's logits: the max, then the sum in column order (two
// passes; the CUDA kernel folds per thread, then across the block, the same contract). y: the
// target's local column.
template <typename A>
void row_stats(float* out, const A* z, int64_t Vv, int64_t y) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < Vv; ++j) m = std::max(m, to_float(z[j]));
  float s = 0.f;
  for (int64_t j = 0; j < Vv; ++j) s += std::exp(to_float(z[j]) - m);
  out[0] = m;
  out[1] = s;
  out[2] = y >= 0 && y < Vv ? to_float(z[y]) : 0.f;
}

// Step 3 for one row z[0, Vl) (first Vv real) of target y: totals() of the ranks' statistics of
// the row (rank r's at row + r * rank_stride), then z OVERWRITTEN with grad() in the real
// columns, 0 in the padding; returns the row's loss. An ignored row (y < 0) gets loss 0 and
// gradient 0, a target >= V NaN (visible).
template <typename A>
float finish_row(A* z, const float* row, int64_t rank_stride, int tp, int32_t y, float dloss, int V,
                 int Vl, int Vv, int v0) {
  if (y < 0 || y >= V) {
    const float fill = y < 0 ? 0.f : std::numeric_limits<float>::quiet_NaN();
    for (int j = 0; j < Vl; ++j) z[j] = from_float<A>(j < Vv ? fill : 0.f);
    return fill;
  }
  const Totals t = totals(row, rank_stride, tp);
  const float inv_s = 1.f / t.sum;
  const int64_t local_y = static_cast<int64_t>(y) - v0;
  for (int j = 0; j < Vv; ++j) {
    z[j] = from_float<A>(grad(to_float(z[j]), t.max, inv_s, dloss, j == local_y));
  }
  for (int j = Vv; j < Vl; ++j) z[j] = from_float<A>(0.f);
  return loss(t);
}

}  // namespace vocab_ce

class HostAdamW final : public Backend::AdamW {
 public:
  explicit HostAdamW(std::span<const Backend::AdamWSegment> segments)
      : segments_(segments.begin(), segments.end()) {
    for (size_t i = 0; i < segments_.size(); ++i) {
      const Backend::AdamWSegment& s = segments_[i];
      WEFT_CHECK(s.params != nullptr && s.grads != nullptr && s.m != nullptr && s.v != nullptr,
                 "AdamW segment ", i, " has a null tensor");
      WEFT_CHECK(s.n >= 0, "AdamW segment ", i, " has negative size ", s.n);
    }
  }

  // kernels::cpu::adamw_update (the optimized CPU kernel, built with -ffast-math so that it
  // vectorizes: written here without it, the same loop took 8x as long, 17% of a pipe-8l step),
  // then the bf16 copy rounded from the updated weights.
  void step(float lr, float beta1, float beta2, float eps, int t, float grad_scale) override {
    WEFT_CHECK(t >= 1, "AdamW step t=", t, " must be >= 1");
    for (const Backend::AdamWSegment& s : segments_) {
      cpu::adamw_update(s.params, s.grads, s.m, s.v, s.n, lr, beta1, beta2, eps, s.weight_decay, t,
                        grad_scale);
      if (s.params16 == nullptr) continue;
#pragma omp parallel for schedule(static) if (s.n >= kHostMinParallel)
      for (int64_t i = 0; i < s.n; ++i) s.params16[i] = BF16::from_float(s.params[i]);
    }
  }

 private:
  std::vector<Backend::AdamWSegment> segments_;
};

// The memory calls, sum_squares, plan_adamw and the shared ops of a host backend whose other ops
// Impl writes with A.
template <typename Impl, typename A>
class HostBackend : public TypedBackend<Impl, A> {
 public:
  std::string name() const override { return "host"; }
  bool attention_supports(int C, int NH) const override { return NH > 0 && C > 0 && C % NH == 0; }

  // ---- memory ----------------------------------------------------------------------------------

  // glibc's mmap threshold fixed before the first block: the memory model prices the host's heap
  // temporaries by it (core/memory_usage.h).
  HostBackend() { fix_mmap_threshold(); }
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;
  ~HostBackend() override {
    for (const Block& b : blocks_) {
      if (b.mapped > 0) {
        munmap(b.p, b.mapped);
      } else {
        std::free(b.p);
      }
    }
  }

  using Backend::allocate;  // keep allocate<T>(count) visible next to the override
  // A block of kHugePageBytes or more starts on a huge-page boundary, spans whole huge pages and
  // is advised as huge (transparent huge pages; advice only), so its pages fault in huge: fewer
  // TLB misses, and a peer's single-copy read (Open MPI's CMA: the replicas' reductions, ZeRO's
  // gathers) pins 512x fewer pages. Without it ZeRO-3's reductions took twice as long at dp=2
  // (bench/zero/run.sh). The memory model counts the whole huge pages (model/memory.cc).
  // Those blocks are mapped here (mmap) and unmapped with the backend, so they never reach the
  // heap: under glibc's dynamic mmap threshold (before fix_mmap_threshold) the next backend's
  // blocks came from the heap and stayed resident once freed, and `weft tune`'s trials measured
  // 11-22% above their prediction.
  void* allocate(int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "allocate of ", bytes, " bytes");
    const bool huge = bytes >= kHugePageBytes;
    const int64_t align = huge ? kHugePageBytes : kHostAlignment;
    const int64_t total = (std::max<int64_t>(bytes, 1) + align - 1) / align * align;
    void* p = huge ? map_huge(total)
                   : std::aligned_alloc(static_cast<size_t>(align), static_cast<size_t>(total));
    WEFT_CHECK(p != nullptr, "host memory exhausted: allocate of ", bytes, " bytes (",
               allocated_bytes_, " already allocated)");
    blocks_.push_back({p, huge ? static_cast<size_t>(total) : 0});
    // Counted as the CUDA arena counts: each block starts on a 256-byte boundary.
    allocated_bytes_ += (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    return p;
  }
  int64_t allocated_bytes() const override { return allocated_bytes_; }
  // FP32: yes, the CPU engine reads and writes its state in place. The bf16 backend emulates a
  // GPU, including that its memory is reached through upload and download only: callers take the
  // device's paths (checkpoints streamed through the staging buffer, losses copied back), which
  // are then tested without a GPU.
  bool host_memory() const override { return sizeof(A) == 4; }
  void upload(void* dst, const void* host_src, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "upload of ", bytes, " bytes");
    if (bytes > 0) std::memcpy(dst, host_src, static_cast<size_t>(bytes));
  }
  void download(void* host_dst, const void* src, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "download of ", bytes, " bytes");
    if (bytes > 0) std::memcpy(host_dst, src, static_cast<size_t>(bytes));
  }
  void upload_async(void* dst, const void* host_src, int64_t bytes) override {
    upload(dst, host_src, bytes);  // the ops run as they are called: nothing to wait for
  }
  void zero(void* p, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "zero of ", bytes, " bytes");
    if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "copy of ", bytes, " bytes");
    if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
  }
  void synchronize() override {}  // every op has finished when it returns

  double sum_squares(const float* x, int64_t n) override {
    WEFT_CHECK(n >= 0, "negative element count ", n);
    return cpu::sum_squares(x, n);  // double, fixed chunks: the same bits on every run
  }

  void add_mean(double* sum, const float* x, int64_t n, int64_t count) override {
    WEFT_CHECK(n >= 0 && count > 0, "add_mean of ", n, " elements over ", count);
    const double s = std::accumulate(x, x + n, 0.0);
    *sum += static_cast<float>(s / static_cast<double>(count));
  }

  void accumulate(float* dst, const float* src, int64_t n) override {
    WEFT_CHECK(n >= 0, "negative element count ", n);
    cpu::residual_forward(dst, dst, src, n);  // element-wise: out may alias a
  }

  using Backend::plan_adamw;
  // The bf16 backend emulates the device's memory too: it takes the blocks the CUDA backend
  // uploads its tables to (backend.h), which the memory model counts. The host's AdamW walks the
  // segments themselves and needs no table.
  std::unique_ptr<Backend::AdamW> plan_adamw(std::span<const Backend::AdamWSegment> segments,
                                             AdamWCapacity capacity) override {
    if (sizeof(A) == 2) {
      const AdamWTableBytes table = adamw_table_bytes(capacity);
      allocate(table.segments);
      allocate(table.chunks);
    }
    return std::make_unique<HostAdamW>(segments);
  }

  // ---- ops -------------------------------------------------------------------------------------

  // Tensor-parallel rank's partial embedding (Megatron-LM's VocabParallelEmbedding): the
  // expression of embedding_forward with the rows this rank does not hold read as 0, so rank 0
  // (which passes wpe) writes exactly embedding_forward's value for its own tokens, and every other
  // partial is one row of wte (exact): the fp32 sum over ranks, rounded, is embedding_forward's
  // output.
  void embedding_forward_shard(A* out, const int32_t* tokens, const A* wte, const A* wpe, int B,
                               int T, int C, int v0, int Vl) {
    check_embedding_shard(B, T, C, v0, Vl);
    const int64_t N = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static) if (N * C >= kHostMinParallel)
    for (int64_t n = 0; n < N; ++n) {
      A* o = out + n * C;  // [C]
      const int64_t row = static_cast<int64_t>(tokens[n]) - v0;
      const A* e = row >= 0 && row < Vl ? wte + row * C : nullptr;  // [C] or none
      const A* p = wpe != nullptr ? wpe + (n % T) * C : nullptr;    // [C] or none
      for (int c = 0; c < C; ++c) {
        const float x = e != nullptr ? to_float(e[c]) : 0.f;
        const float y = p != nullptr ? to_float(p[c]) : 0.f;
        o[c] = from_float<A>(x + y);
      }
    }
  }

  // The vocabulary-parallel cross-entropy of kernels/vocab_parallel_ce.h, a row at a time: with
  // tp = 1 and v0 = 0 the bf16 backend's bits are those of its softmax_cross_entropy.
  // stats[N,3] = row_stats of each row's Vv real columns.
  void cross_entropy_shard_stats(float* stats, const A* logits, const int32_t* targets, int N,
                                 int Vl, int Vv, int v0) {
    check_cross_entropy_shard(N, Vl, Vv, v0);
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * Vv >= kHostMinParallel)
    for (int n = 0; n < N; ++n) {
      vocab_ce::row_stats(stats + int64_t{vocab_ce::kStats} * n, logits + int64_t{n} * Vl, Vv,
                          int64_t{targets[n]} - v0);
    }
  }
  // finish_row of every row of logits[N,Vl] from every rank's stats (all_stats[tp,N,3]).
  void cross_entropy_shard_finish(float* losses, A* logits, const float* all_stats, int tp,
                                  const int32_t* targets, float dloss, int N, int V, int Vl, int Vv,
                                  int v0) {
    check_cross_entropy_shard(N, Vl, Vv, v0);
    WEFT_CHECK(tp >= 1 && V > 0 && Vv == vocab_ce::real_columns(V, v0, Vl),
               "vocabulary-parallel cross-entropy with tp=", tp, " V=", V, " v0=", v0, " Vl=", Vl,
               " Vv=", Vv, " (Vv must be max(0, min(Vl, V - v0)))");
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(N) * Vl >= kHostMinParallel)
    for (int n = 0; n < N; ++n) {
      losses[n] =
          vocab_ce::finish_row(logits + int64_t{n} * Vl, all_stats + int64_t{vocab_ce::kStats} * n,
                               int64_t{vocab_ce::kStats} * N, tp, targets[n], dloss, V, Vl, Vv, v0);
    }
  }

 protected:
  static void check_embedding_shard(int B, int T, int C, int v0, int Vl) {
    WEFT_CHECK(B >= 0 && T >= 0 && C > 0 && v0 >= 0 && Vl >= 0, "embedding shard with B=", B,
               " T=", T, " C=", C, " v0=", v0, " Vl=", Vl);
  }

  // The median of `reps` timed linear_forward calls of [N,IC] x [OC,IC]^T after a warm-up, on
  // buffers of its own (the caller checks the sizes).
  double time_linear_forward(int N, int IC, int OC, int reps) {
    std::vector<A> inp(static_cast<size_t>(N) * IC, from_float<A>(0.01f));
    std::vector<A> weight(static_cast<size_t>(OC) * IC, from_float<A>(0.01f));
    std::vector<A> out(static_cast<size_t>(N) * OC);
    auto run = [&] {
      this->self().linear_forward(out.data(), nullptr, inp.data(), weight.data(), nullptr, N, IC,
                                  OC);
    };
    run();  // warm-up
    std::vector<double> seconds(static_cast<size_t>(reps));
    for (double& s : seconds) {
      const auto start = std::chrono::steady_clock::now();
      run();
      s = seconds_since(start);
    }
    return median(std::move(seconds));
  }

 private:
  static void check_cross_entropy_shard(int N, int Vl, int Vv, int v0) {
    WEFT_CHECK(N >= 0 && Vl > 0 && Vv >= 0 && Vv <= Vl && v0 >= 0,
               "vocabulary-parallel cross-entropy with N=", N, " Vl=", Vl, " Vv=", Vv, " v0=", v0);
  }

  // `bytes` (whole huge pages) on a huge-page boundary, advised as huge; null when the system has
  // no memory for it. The slack that aligned it is unmapped at once.
  static void* map_huge(int64_t bytes) {
    const auto n = static_cast<uintptr_t>(bytes), page = static_cast<uintptr_t>(kHugePageBytes);
    void* raw = mmap(nullptr, n + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const auto base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (base + page - 1) / page * page;
    if (start > base) munmap(raw, start - base);
    if (base + page > start) munmap(reinterpret_cast<void*>(start + n), base + page - start);
    madvise(reinterpret_cast<void*>(start), n, MADV_HUGEPAGE);
    return reinterpret_cast<void*>(start);
  }

  // A block: mapped by map_huge (`mapped` bytes) or from aligned_alloc (mapped == 0).
  struct Block {
    void* p = nullptr;
    size_t mapped = 0;
  };
  std::vector<Block> blocks_;
  int64_t allocated_bytes_ = 0;
};

}  // namespace weft::kernels
