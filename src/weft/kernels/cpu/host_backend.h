#pragma once
// What the two host backends (host_fp32.cc, host_bf16.cc) share: host memory handed out and
// counted as the CUDA arena hands it out and counts it, AdamW over segments with the arithmetic of
// cpu::adamw_update, and the sum of squares of cpu::sum_squares. Internal to kernels/cpu.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include <sys/mman.h>

#include "weft/core/check.h"
#include "weft/core/dtype.h"
#include "weft/core/memory_usage.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/kernels.h"

namespace weft::kernels {

// The two host backends (make_host_backend picks one).
std::unique_ptr<Backend> make_host_fp32_backend();
std::unique_ptr<Backend> make_host_bf16_backend();

inline constexpr int64_t kHostAlignment = 256;  // what cuBLASLt prefers; the CUDA arena's default
// Element-wise loops on fewer elements than this stay on the calling thread.
inline constexpr int64_t kHostMinParallel = int64_t{1} << 15;

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

// The memory calls, sum_squares and plan_adamw of a host backend whose ops Impl writes with A.
template <typename Impl, typename A>
class HostBackend : public TypedBackend<Impl, A> {
 public:
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
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
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

 private:
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
