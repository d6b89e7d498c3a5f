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

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weft/kernels/backend.h"

namespace weft::kernels {

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}

  // Off: every call is forwarded untimed (a step runs as without the wrapper).
  void set_enabled(bool on);
  bool enabled() const { return enabled_; }
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
  std::vector<OpTime> times() const;

  std::string name() const override { return inner_.name(); }
  Precision precision() const override { return inner_.precision(); }
  using Backend::allocate;
  void* allocate(int64_t bytes) override { return inner_.allocate(bytes); }
  int64_t allocated_bytes() const override { return inner_.allocated_bytes(); }
  bool host_memory() const override { return inner_.host_memory(); }
  CUstream_st* cuda_stream() const override { return inner_.cuda_stream(); }
  void upload(void* dst, const void* src, int64_t bytes) override;
  void download(void* dst, const void* src, int64_t bytes) override;
  void upload_async(void* dst, const void* src, int64_t bytes) override;
  std::shared_ptr<void> allocate_host(int64_t bytes) override {
    return inner_.allocate_host(bytes);
  }
  void download_async(void* dst, const void* src, int64_t bytes) override;
  void wait_downloads() override {
    ++host_waits_;
    inner_.wait_downloads();
  }
  void order_after_downloads() override { inner_.order_after_downloads(); }
  void zero(void* p, int64_t bytes) override;
  void copy(void* dst, const void* src, int64_t bytes) override;
  void synchronize() override {
    ++host_waits_;
    inner_.synchronize();
  }

  void convert(Act* out, const float* in, int64_t n) override;
  void embedding_forward(Act* out, const int32_t* tokens, const Act* wte, const Act* wpe, int B,
                         int T, int C) override;
  void embedding_backward(float* dwte, float* dwpe, const Act* dout, const int32_t* tokens_host,
                          int B, int T, int C) override;
  void embedding_forward_shard(Act* out, const int32_t* tokens, const Act* wte, const Act* wpe,
                               int B, int T, int C, int v0, int Vl) override;
  void embedding_backward_shard(float* dwte, float* dwpe, const Act* dout,
                                const int32_t* tokens_host, int B, int T, int C, int v0,
                                int Vl) override;
  void residual_forward(Act* out, const Act* a, const Act* b, int64_t n) override;
  void layernorm_forward(Act* out, float* mean, float* rstd, const Act* inp, const Act* weight,
                         const Act* bias, int N, int C, Norm norm) override;
  void fused_residual_layernorm_forward(Act* residual, Act* out, float* mean, float* rstd,
                                        const Act* a, const Act* b, const Act* weight,
                                        const Act* bias, int N, int C, Norm norm) override;
  void layernorm_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                          const Act* weight, const float* mean, const float* rstd, int N, int C,
                          Norm norm) override;
  void linear_forward(Act* out, Act* pre_gelu, const Act* inp, const Act* weight, const Act* bias,
                      int N, int IC, int OC) override;
  void linear_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                       const Act* weight, const Act* gelu_pre, int N, int IC, int OC) override;
  void swiglu_forward(Act* out, const Act* inp, int N, int F) override;
  void swiglu_backward(Act* dinp, const Act* dout, const Act* inp, int N, int F) override;
  void rope(Act* qkv, int B, int T, int NH, int NKV, int HS, float theta, bool inverse) override;
  void attention_forward(Act* out, float* saved, const Act* qkv, int B, int T, int C, int NH,
                         int NKV) override;
  void attention_backward(Act* dqkv, const Act* dout, const Act* qkv, const Act* out,
                          const float* saved, int B, int T, int C, int NH, int NKV) override;
  bool attention_supports(int C, int NH) const override { return inner_.attention_supports(C, NH); }
  int64_t attention_saved_floats(int B, int T, int NH) const override {
    return inner_.attention_saved_floats(B, T, NH);
  }
  void softmax_cross_entropy(float* losses, Act* logits, const int32_t* targets, float dloss, int N,
                             int V, int Vp) override;
  void cross_entropy_shard_stats(float* stats, const Act* logits, const int32_t* targets, int N,
                                 int Vl, int Vv, int v0) override;
  void cross_entropy_shard_finish(float* losses, Act* logits, const float* all_stats, int tp,
                                  const int32_t* targets, float dloss, int N, int V, int Vl, int Vv,
                                  int v0) override;
  double sum_squares(const float* x, int64_t n) override;
  void add_mean(double* sum, const float* x, int64_t n, int64_t count) override;
  void accumulate(float* dst, const float* src, int64_t n) override;
  using Backend::plan_adamw;
  std::unique_ptr<AdamW> plan_adamw(std::span<const AdamWSegment> segments,
                                    AdamWCapacity capacity) override;
  double linear_forward_seconds(int N, int IC, int OC, int reps) override {
    return inner_.linear_forward_seconds(N, IC, OC, reps);
  }

 private:
  // Times one op: everything queued before it first finishes, then the op, then its time is
  // added under `op`.
  template <typename F>
  void timed(const std::string& op, F&& f);

  Backend& inner_;
  bool enabled_ = false;
  std::map<std::string, OpTime> times_;
  int64_t host_waits_ = 0;
};

}  // namespace weft::kernels
