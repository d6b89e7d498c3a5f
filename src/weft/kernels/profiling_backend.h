#pragma once
// A Backend that forwards to another one and, while enabled, times every op: it waits for
// the op to finish (inner.synchronize()) and adds the wall time to the op's entry, keyed by the
// op's name and, for the linear layers, its shape ("linear_forward 768->2304 (N=32768)"). With
// one synchronization per op the times are each op's own device time plus its launch, so the
// sum approaches the step's time; what a step spends outside the ops (host work, waiting on
// communication) is the difference. `weft bench step --device ... --profile` prints the table:
// where a GPU step's time goes, measured in the same run as the step time.
//
// Enabled or not, it counts the calls that make the host wait for the device (upload, download,
// synchronize, sum_squares: backend.h; not upload_async), so that a test can hold the runtime to a
// fixed number of them per step, whatever the number of microbatches and layers (docs/cuda.md,
// "Streams and events"), and `weft bench step` prints them.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weft/core/clock.h"
#include "weft/kernels/backend.h"

namespace weft::kernels {

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}

  // Off: every call is forwarded untimed (a step runs as without the wrapper).
  void set_enabled(bool on) {
    if (on) inner_.synchronize();  // what came before is not the first op's
    enabled_ = on;
  }
  void reset() { times_.clear(); }
  // Calls that waited for the device since the last reset_host_waits().
  int64_t host_waits() const { return host_waits_; }
  void reset_host_waits() { host_waits_ = 0; }

  struct OpTime {
    std::string op;
    int64_t calls = 0;
    double seconds = 0;
  };
  // What was timed since the last reset(), largest total first.
  std::vector<OpTime> times() const {
    std::vector<OpTime> out;
    for (const auto& [name, t] : times_) out.push_back(t);
    std::sort(out.begin(), out.end(),
              [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
    return out;
  }

  std::string name() const override { return inner_.name(); }
  Precision precision() const override { return inner_.precision(); }
  using Backend::allocate;
  void* allocate(int64_t bytes) override { return inner_.allocate(bytes); }
  int64_t allocated_bytes() const override { return inner_.allocated_bytes(); }
  bool host_memory() const override { return inner_.host_memory(); }
  CUstream_st* cuda_stream() const override { return inner_.cuda_stream(); }
  void upload(void* dst, const void* src, int64_t bytes) override {
    ++host_waits_;
    timed("upload", [&] { inner_.upload(dst, src, bytes); });
  }
  void download(void* dst, const void* src, int64_t bytes) override {
    ++host_waits_;
    timed("download", [&] { inner_.download(dst, src, bytes); });
  }
  void upload_async(void* dst, const void* src, int64_t bytes) override {
    timed("upload_async", [&] { inner_.upload_async(dst, src, bytes); });
  }
  std::shared_ptr<void> allocate_host(int64_t bytes) override {
    return inner_.allocate_host(bytes);
  }
  void download_async(void* dst, const void* src, int64_t bytes) override {
    timed("download_async", [&] { inner_.download_async(dst, src, bytes); });
  }
  void wait_downloads() override {
    ++host_waits_;
    inner_.wait_downloads();
  }
  void order_after_downloads() override { inner_.order_after_downloads(); }
  void zero(void* p, int64_t bytes) override {
    timed("zero", [&] { inner_.zero(p, bytes); });
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    timed("copy", [&] { inner_.copy(dst, src, bytes); });
  }
  void synchronize() override {
    ++host_waits_;
    inner_.synchronize();
  }

  void convert(Act* out, const float* in, int64_t n) override {
    timed("convert", [&] { inner_.convert(out, in, n); });
  }
  void embedding_forward(Act* out, const int32_t* tokens, const Act* wte, const Act* wpe, int B,
                         int T, int C) override {
    timed("embedding_forward", [&] { inner_.embedding_forward(out, tokens, wte, wpe, B, T, C); });
  }
  void embedding_backward(float* dwte, float* dwpe, const Act* dout, const int32_t* tokens_host,
                          int B, int T, int C) override {
    timed("embedding_backward",
          [&] { inner_.embedding_backward(dwte, dwpe, dout, tokens_host, B, T, C); });
  }
  void embedding_forward_shard(Act* out, const int32_t* tokens, const Act* wte, const Act* wpe,
                               int B, int T, int C, int v0, int Vl) override {
    timed("embedding_forward_shard",
          [&] { inner_.embedding_forward_shard(out, tokens, wte, wpe, B, T, C, v0, Vl); });
  }
  void embedding_backward_shard(float* dwte, float* dwpe, const Act* dout,
                                const int32_t* tokens_host, int B, int T, int C, int v0,
                                int Vl) override {
    timed("embedding_backward_shard",
          [&] { inner_.embedding_backward_shard(dwte, dwpe, dout, tokens_host, B, T, C, v0, Vl); });
  }
  void residual_forward(Act* out, const Act* a, const Act* b, int64_t n) override {
    timed("residual_forward", [&] { inner_.residual_forward(out, a, b, n); });
  }
  // RMSNorm runs through the layernorm_* ops; its entries are named for it.
  void layernorm_forward(Act* out, float* mean, float* rstd, const Act* inp, const Act* weight,
                         const Act* bias, int N, int C, Norm norm) override {
    timed(norm.rms ? "rmsnorm_forward" : "layernorm_forward",
          [&] { inner_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, norm); });
  }
  void fused_residual_layernorm_forward(Act* residual, Act* out, float* mean, float* rstd,
                                        const Act* a, const Act* b, const Act* weight,
                                        const Act* bias, int N, int C, Norm norm) override {
    timed(norm.rms ? "fused_residual_rmsnorm_forward" : "fused_residual_layernorm_forward", [&] {
      inner_.fused_residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C,
                                              norm);
    });
  }
  void layernorm_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                          const Act* weight, const float* mean, const float* rstd, int N, int C,
                          Norm norm) override {
    timed(norm.rms ? "rmsnorm_backward" : "layernorm_backward", [&] {
      inner_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, norm);
    });
  }
  void linear_forward(Act* out, Act* pre_gelu, const Act* inp, const Act* weight, const Act* bias,
                      int N, int IC, int OC) override {
    timed(linear_name("linear_forward", N, IC, OC, pre_gelu != nullptr),
          [&] { inner_.linear_forward(out, pre_gelu, inp, weight, bias, N, IC, OC); });
  }
  void linear_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                       const Act* weight, const Act* gelu_pre, int N, int IC, int OC) override {
    timed(linear_name("linear_backward", N, IC, OC, gelu_pre != nullptr), [&] {
      inner_.linear_backward(dinp, dweight, dbias, dout, inp, weight, gelu_pre, N, IC, OC);
    });
  }
  void swiglu_forward(Act* out, const Act* inp, int N, int F) override {
    timed("swiglu_forward", [&] { inner_.swiglu_forward(out, inp, N, F); });
  }
  void swiglu_backward(Act* dinp, const Act* dout, const Act* inp, int N, int F) override {
    timed("swiglu_backward", [&] { inner_.swiglu_backward(dinp, dout, inp, N, F); });
  }
  void rope(Act* qkv, int B, int T, int NH, int NKV, int HS, float theta, bool inverse) override {
    timed(inverse ? "rope_backward" : "rope_forward",
          [&] { inner_.rope(qkv, B, T, NH, NKV, HS, theta, inverse); });
  }
  void attention_forward(Act* out, float* saved, const Act* qkv, int B, int T, int C, int NH,
                         int NKV) override {
    timed("attention_forward",
          [&] { inner_.attention_forward(out, saved, qkv, B, T, C, NH, NKV); });
  }
  void attention_backward(Act* dqkv, const Act* dout, const Act* qkv, const Act* out,
                          const float* saved, int B, int T, int C, int NH, int NKV) override {
    timed("attention_backward",
          [&] { inner_.attention_backward(dqkv, dout, qkv, out, saved, B, T, C, NH, NKV); });
  }
  bool attention_supports(int C, int NH) const override { return inner_.attention_supports(C, NH); }
  int64_t attention_saved_floats(int B, int T, int NH) const override {
    return inner_.attention_saved_floats(B, T, NH);
  }
  void softmax_cross_entropy(float* losses, Act* logits, const int32_t* targets, float dloss, int N,
                             int V, int Vp) override {
    timed("softmax_cross_entropy",
          [&] { inner_.softmax_cross_entropy(losses, logits, targets, dloss, N, V, Vp); });
  }
  void cross_entropy_shard_stats(float* stats, const Act* logits, const int32_t* targets, int N,
                                 int Vl, int Vv, int v0) override {
    timed("cross_entropy_shard_stats",
          [&] { inner_.cross_entropy_shard_stats(stats, logits, targets, N, Vl, Vv, v0); });
  }
  void cross_entropy_shard_finish(float* losses, Act* logits, const float* all_stats, int tp,
                                  const int32_t* targets, float dloss, int N, int V, int Vl, int Vv,
                                  int v0) override {
    timed("cross_entropy_shard_finish", [&] {
      inner_.cross_entropy_shard_finish(losses, logits, all_stats, tp, targets, dloss, N, V, Vl, Vv,
                                        v0);
    });
  }
  double sum_squares(const float* x, int64_t n) override {
    double r = 0;
    ++host_waits_;
    timed("sum_squares", [&] { r = inner_.sum_squares(x, n); });
    return r;
  }
  void add_mean(double* sum, const float* x, int64_t n, int64_t count) override {
    timed("add_mean", [&] { inner_.add_mean(sum, x, n, count); });
  }
  void accumulate(float* dst, const float* src, int64_t n) override {
    timed("accumulate", [&] { inner_.accumulate(dst, src, n); });
  }
  using Backend::plan_adamw;
  // The plan's step is an op too: AdamW over every tensor in one launch.
  std::unique_ptr<Backend::AdamW> plan_adamw(std::span<const AdamWSegment> segments,
                                             AdamWCapacity capacity) override {
    class Timed final : public AdamW {
     public:
      Timed(ProfilingBackend& p, std::unique_ptr<AdamW> inner) : p_(p), inner_(std::move(inner)) {}
      void step(float lr, float beta1, float beta2, float eps, int t, float grad_scale) override {
        p_.timed("adamw", [&] { inner_->step(lr, beta1, beta2, eps, t, grad_scale); });
      }

     private:
      ProfilingBackend& p_;
      std::unique_ptr<AdamW> inner_;
    };
    return std::make_unique<Timed>(*this, inner_.plan_adamw(segments, capacity));
  }
  double linear_forward_seconds(int N, int IC, int OC, int reps) override {
    return inner_.linear_forward_seconds(N, IC, OC, reps);
  }

 private:
  // Times one op: everything queued before it first finishes, then the op, then its time is
  // added under `op`.
  template <typename F>
  void timed(const std::string& op, F&& f) {
    if (!enabled_) {
      f();
      return;
    }
    inner_.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    inner_.synchronize();
    OpTime& t = times_[op];
    t.op = op;
    ++t.calls;
    t.seconds += seconds_since(t0);
  }
  static std::string linear_name(const char* op, int N, int IC, int OC, bool gelu) {
    return std::string(op) + " " + std::to_string(IC) + "->" + std::to_string(OC) +
           (gelu ? " +gelu" : "") + " (N=" + std::to_string(N) + ")";
  }

  Backend& inner_;
  bool enabled_ = false;
  std::map<std::string, OpTime> times_;
  int64_t host_waits_ = 0;
};

}  // namespace weft::kernels
