#include "weft/kernels/profiling_backend.h"

#include "weft/core/clock.h"

#include <algorithm>

namespace weft::kernels {
namespace {

std::string linear_name(const char* op, int N, int IC, int OC, bool gelu) {
  return std::string(op) + " " + std::to_string(IC) + "->" + std::to_string(OC) +
         (gelu ? " +gelu" : "") + " (N=" + std::to_string(N) + ")";
}

}  // namespace

void ProfilingBackend::set_enabled(bool on) {
  if (on) inner_.synchronize();  // what came before is not the first op's
  enabled_ = on;
}

std::vector<ProfilingBackend::OpTime> ProfilingBackend::times() const {
  std::vector<OpTime> out;
  for (const auto& [name, t] : times_) out.push_back(t);
  std::sort(out.begin(), out.end(),
            [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

template <typename F>
void ProfilingBackend::timed(const std::string& op, F&& f) {
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

void ProfilingBackend::upload(void* dst, const void* src, int64_t bytes) {
  ++host_waits_;
  timed("upload", [&] { inner_.upload(dst, src, bytes); });
}
void ProfilingBackend::download(void* dst, const void* src, int64_t bytes) {
  ++host_waits_;
  timed("download", [&] { inner_.download(dst, src, bytes); });
}
void ProfilingBackend::upload_async(void* dst, const void* src, int64_t bytes) {
  timed("upload_async", [&] { inner_.upload_async(dst, src, bytes); });
}
void ProfilingBackend::download_async(void* dst, const void* src, int64_t bytes) {
  timed("download_async", [&] { inner_.download_async(dst, src, bytes); });
}
void ProfilingBackend::zero(void* p, int64_t bytes) {
  timed("zero", [&] { inner_.zero(p, bytes); });
}
void ProfilingBackend::copy(void* dst, const void* src, int64_t bytes) {
  timed("copy", [&] { inner_.copy(dst, src, bytes); });
}
void ProfilingBackend::convert(Act* out, const float* in, int64_t n) {
  timed("convert", [&] { inner_.convert(out, in, n); });
}
void ProfilingBackend::embedding_forward(Act* out, const int32_t* tokens, const Act* wte,
                                         const Act* wpe, int B, int T, int C) {
  timed("embedding_forward", [&] { inner_.embedding_forward(out, tokens, wte, wpe, B, T, C); });
}
void ProfilingBackend::embedding_backward(float* dwte, float* dwpe, const Act* dout,
                                          const int32_t* tokens_host, int B, int T, int C) {
  timed("embedding_backward",
        [&] { inner_.embedding_backward(dwte, dwpe, dout, tokens_host, B, T, C); });
}
void ProfilingBackend::embedding_forward_shard(Act* out, const int32_t* tokens, const Act* wte,
                                               const Act* wpe, int B, int T, int C, int v0,
                                               int Vl) {
  timed("embedding_forward_shard",
        [&] { inner_.embedding_forward_shard(out, tokens, wte, wpe, B, T, C, v0, Vl); });
}
void ProfilingBackend::embedding_backward_shard(float* dwte, float* dwpe, const Act* dout,
                                                const int32_t* tokens_host, int B, int T, int C,
                                                int v0, int Vl) {
  timed("embedding_backward_shard",
        [&] { inner_.embedding_backward_shard(dwte, dwpe, dout, tokens_host, B, T, C, v0, Vl); });
}
void ProfilingBackend::residual_forward(Act* out, const Act* a, const Act* b, int64_t n) {
  timed("residual_forward", [&] { inner_.residual_forward(out, a, b, n); });
}
// RMSNorm runs through the layernorm_* ops; its entries are named for it.
void ProfilingBackend::layernorm_forward(Act* out, float* mean, float* rstd, const Act* inp,
                                         const Act* weight, const Act* bias, int N, int C,
                                         Norm norm) {
  timed(norm.rms ? "rmsnorm_forward" : "layernorm_forward",
        [&] { inner_.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, norm); });
}
void ProfilingBackend::fused_residual_layernorm_forward(Act* residual, Act* out, float* mean,
                                                        float* rstd, const Act* a, const Act* b,
                                                        const Act* weight, const Act* bias, int N,
                                                        int C, Norm norm) {
  timed(norm.rms ? "fused_residual_rmsnorm_forward" : "fused_residual_layernorm_forward", [&] {
    inner_.fused_residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C,
                                            norm);
  });
}
void ProfilingBackend::layernorm_backward(Act* dinp, float* dweight, float* dbias, const Act* dout,
                                          const Act* inp, const Act* weight, const float* mean,
                                          const float* rstd, int N, int C, Norm norm) {
  timed(norm.rms ? "rmsnorm_backward" : "layernorm_backward", [&] {
    inner_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, norm);
  });
}
void ProfilingBackend::linear_forward(Act* out, Act* pre_gelu, const Act* inp, const Act* weight,
                                      const Act* bias, int N, int IC, int OC) {
  timed(linear_name("linear_forward", N, IC, OC, pre_gelu != nullptr),
        [&] { inner_.linear_forward(out, pre_gelu, inp, weight, bias, N, IC, OC); });
}
void ProfilingBackend::linear_backward(Act* dinp, float* dweight, float* dbias, const Act* dout,
                                       const Act* inp, const Act* weight, const Act* gelu_pre,
                                       int N, int IC, int OC) {
  timed(linear_name("linear_backward", N, IC, OC, gelu_pre != nullptr), [&] {
    inner_.linear_backward(dinp, dweight, dbias, dout, inp, weight, gelu_pre, N, IC, OC);
  });
}
void ProfilingBackend::swiglu_forward(Act* out, const Act* inp, int N, int F) {
  timed("swiglu_forward", [&] { inner_.swiglu_forward(out, inp, N, F); });
}
void ProfilingBackend::swiglu_backward(Act* dinp, const Act* dout, const Act* inp, int N, int F) {
  timed("swiglu_backward", [&] { inner_.swiglu_backward(dinp, dout, inp, N, F); });
}
void ProfilingBackend::rope(Act* qkv, int B, int T, int NH, int NKV, int HS, float theta,
                            bool inverse) {
  timed(inverse ? "rope_backward" : "rope_forward",
        [&] { inner_.rope(qkv, B, T, NH, NKV, HS, theta, inverse); });
}
void ProfilingBackend::attention_forward(Act* out, float* saved, const Act* qkv, int B, int T,
                                         int C, int NH, int NKV) {
  timed("attention_forward", [&] { inner_.attention_forward(out, saved, qkv, B, T, C, NH, NKV); });
}
void ProfilingBackend::attention_backward(Act* dqkv, const Act* dout, const Act* qkv,
                                          const Act* out, const float* saved, int B, int T, int C,
                                          int NH, int NKV) {
  timed("attention_backward",
        [&] { inner_.attention_backward(dqkv, dout, qkv, out, saved, B, T, C, NH, NKV); });
}
void ProfilingBackend::softmax_cross_entropy(float* losses, Act* logits, const int32_t* targets,
                                             float dloss, int N, int V, int Vp) {
  timed("softmax_cross_entropy",
        [&] { inner_.softmax_cross_entropy(losses, logits, targets, dloss, N, V, Vp); });
}
void ProfilingBackend::cross_entropy_shard_stats(float* stats, const Act* logits,
                                                 const int32_t* targets, int N, int Vl, int Vv,
                                                 int v0) {
  timed("cross_entropy_shard_stats",
        [&] { inner_.cross_entropy_shard_stats(stats, logits, targets, N, Vl, Vv, v0); });
}
void ProfilingBackend::cross_entropy_shard_finish(float* losses, Act* logits,
                                                  const float* all_stats, int tp,
                                                  const int32_t* targets, float dloss, int N, int V,
                                                  int Vl, int Vv, int v0) {
  timed("cross_entropy_shard_finish", [&] {
    inner_.cross_entropy_shard_finish(losses, logits, all_stats, tp, targets, dloss, N, V, Vl, Vv,
                                      v0);
  });
}
double ProfilingBackend::sum_squares(const float* x, int64_t n) {
  double r = 0;
  ++host_waits_;
  timed("sum_squares", [&] { r = inner_.sum_squares(x, n); });
  return r;
}

void ProfilingBackend::add_mean(double* sum, const float* x, int64_t n, int64_t count) {
  timed("add_mean", [&] { inner_.add_mean(sum, x, n, count); });
}

void ProfilingBackend::accumulate(float* dst, const float* src, int64_t n) {
  timed("accumulate", [&] { inner_.accumulate(dst, src, n); });
}

// The plan's step is an op too: AdamW over every tensor in one launch.
std::unique_ptr<Backend::AdamW> ProfilingBackend::plan_adamw(std::span<const AdamWSegment> segments,
                                                             AdamWCapacity capacity) {
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

}  // namespace weft::kernels
