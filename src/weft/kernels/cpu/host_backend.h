#pragma once
// What the two host backends (host_fp32.cc, host_bf16.cc) share: host memory handed out and
// counted as the CUDA arena hands it out and counts it, AdamW over segments with the arithmetic of
// cpu::adamw_update, and the sum of squares of cpu::sum_squares. Internal to kernels/cpu.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "weft/core/check.h"
#include "weft/core/dtype.h"
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

  // The arithmetic of kernels::cpu::adamw_update (bias corrections as reciprocals computed in
  // double), with the gradient scaled first, so a fp32 CPU run and this one agree.
  void step(float lr, float beta1, float beta2, float eps, int t, float grad_scale) override {
    WEFT_CHECK(t >= 1, "AdamW step t=", t, " must be >= 1");
    const float inv_c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), t)));
    const float inv_c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), t)));
    const float one_minus_b1 = 1.f - beta1;
    const float one_minus_b2 = 1.f - beta2;
    for (const Backend::AdamWSegment& s : segments_) {
      const float wd = s.weight_decay;
      auto update = [&](int64_t i) {
        const float g = s.grads[i] * grad_scale;
        const float mi = beta1 * s.m[i] + one_minus_b1 * g;
        const float vi = beta2 * s.v[i] + one_minus_b2 * g * g;
        s.m[i] = mi;
        s.v[i] = vi;
        const float p = s.params[i];
        const float updated = p - lr * ((mi * inv_c1) / (std::sqrt(vi * inv_c2) + eps) + wd * p);
        s.params[i] = updated;
        return updated;
      };
      // Two loops, so that the fp32 one vectorizes as cpu::adamw_update does.
      if (s.params16 == nullptr) {
#pragma omp parallel for simd schedule(static) if (s.n >= kHostMinParallel)
        for (int64_t i = 0; i < s.n; ++i) update(i);
      } else {
#pragma omp parallel for schedule(static) if (s.n >= kHostMinParallel)
        for (int64_t i = 0; i < s.n; ++i) s.params16[i] = BF16::from_float(update(i));
      }
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

  using Backend::allocate;  // keep allocate<T>(count) visible next to the override
  void* allocate(int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "allocate of ", bytes, " bytes");
    void* p = ::operator new (static_cast<size_t>(std::max<int64_t>(bytes, 1)),
                              std::align_val_t{kHostAlignment}, std::nothrow);
    WEFT_CHECK(p != nullptr, "host memory exhausted: allocate of ", bytes, " bytes (",
               allocated_bytes_, " already allocated)");
    blocks_.emplace_back(p);
    // Counted as the CUDA arena counts: each block starts on a 256-byte boundary.
    allocated_bytes_ += (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    return p;
  }
  int64_t allocated_bytes() const override { return allocated_bytes_; }
  bool host_memory() const override { return true; }
  void upload(void* dst, const void* host_src, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "upload of ", bytes, " bytes");
    if (bytes > 0) std::memcpy(dst, host_src, static_cast<size_t>(bytes));
  }
  void download(void* host_dst, const void* src, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "download of ", bytes, " bytes");
    if (bytes > 0) std::memcpy(host_dst, src, static_cast<size_t>(bytes));
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

  void accumulate(float* dst, const float* src, int64_t n) override {
    WEFT_CHECK(n >= 0, "negative element count ", n);
    cpu::residual_forward(dst, dst, src, n);  // element-wise: out may alias a
  }

  std::unique_ptr<Backend::AdamW> plan_adamw(
      std::span<const Backend::AdamWSegment> segments) override {
    return std::make_unique<HostAdamW>(segments);
  }

 private:
  struct AlignedDelete {
    void operator()(void* p) const { ::operator delete (p, std::align_val_t{kHostAlignment}); }
  };
  std::vector<std::unique_ptr<void, AlignedDelete>> blocks_;
  int64_t allocated_bytes_ = 0;
};

}  // namespace weft::kernels
