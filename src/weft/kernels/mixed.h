#pragma once
// The mixed-precision training kernels behind one interface: what model::MixedGpt (the GPU
// trainer's model, docs/cuda.md) runs a GPT-2 with. Micikevicius et al. 2018, "Mixed Precision
// Training": activations and a copy of the weights in bf16; master weights, parameter gradients
// and AdamW state in fp32; every product and reduction accumulates in fp32.
//
// Two implementations:
//   cuda::make_mixed_backend (kernels/cuda/mixed_backend.h): the GPU, through the kernels of
//     kernels_cuda.h, on device memory from one Arena;
//   make_host_mixed_backend() (cpu/mixed_host.cc): the same ops on host memory with bf16 rounding
//     at the same points, computed in fp32 by the CPU kernels. It tests the model's orchestration
//     (buffers, call order, gradient flow) on machines without a GPU, and is the reference the GPU
//     model is checked against.
//
// Conventions (those of kernels_cuda.h's mixed layer): every pointer is the backend's memory,
// allocated by allocate(); row-major; N = B*T rows. Gradients follow the one rule of every backend
// (ops.inc; docs/training.md, "Gradients: written or accumulated", says why): bf16 activation
// gradients are WRITTEN (each has one producer), except layernorm_backward's dinp, which ADDS into
// the residual stream's gradient; fp32 parameter gradients ADD, so microbatches accumulate. Ops run
// in order; the calls that return a host value (download, sum_squares) wait for everything before
// them.

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "weft/core/dtype.h"

namespace weft::kernels {

class MixedBackend {
 public:
  virtual ~MixedBackend() = default;

  // "host", or "cuda:0 (NVIDIA H200)".
  virtual std::string name() const = 0;

  // ---- memory ----------------------------------------------------------------------------------
  // `bytes` of the backend's memory, 256-byte aligned, contents undefined, owned by the backend
  // until it is destroyed. Throws weft::Error when the backend's memory is exhausted.
  virtual void* allocate(int64_t bytes) = 0;
  template <typename T>
  T* allocate(int64_t count) {
    return static_cast<T*>(allocate(count * static_cast<int64_t>(sizeof(T))));
  }
  virtual int64_t allocated_bytes() const = 0;
  // Host <-> backend copies; they wait until the copy is complete.
  virtual void upload(void* dst, const void* host_src, int64_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, int64_t bytes) = 0;
  virtual void zero(void* p, int64_t bytes) = 0;
  // Within the backend's memory, in order with the ops.
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void synchronize() = 0;

  // ---- ops -------------------------------------------------------------------------------------
  // out[n] = in[n] rounded to bf16 (nearest even).
  virtual void convert(BF16* out, const float* in, int64_t n) = 0;
  // out[n] = in[n] as fp32 (exact): a bf16 partial sum widened for an fp32 all-reduce.
  virtual void widen(float* out, const BF16* in, int64_t n) = 0;
  // out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :]
  virtual void embedding_forward(BF16* out, const int32_t* tokens, const BF16* wte, const BF16* wpe,
                                 int B, int T, int C) = 0;
  // dwte[V,C] += rows of dout scattered by token; dwpe[T,C] += sum over b. tokens_host: the same
  // ids in host memory (the data loader has them), so no copy back is needed.
  virtual void embedding_backward(float* dwte, float* dwpe, const BF16* dout,
                                  const int32_t* tokens_host, int B, int T, int C) = 0;
  // ---- vocabulary-parallel embedding (Megatron-LM: tensor-parallel rank r holds rows
  // [v0, v0 + Vl) of wte) ---------------------------------------------------------------------
  // out[B,T,C] = (v0 <= token < v0 + Vl ? wte[token - v0, :] : 0) + (wpe ? wpe[t, :] : 0), rounded
  // once: this rank's partial sum of the embedding (the ranks' partials add up to
  // embedding_forward's output; tp rank 0 passes wpe, the others null).
  virtual void embedding_forward_shard(BF16* out, const int32_t* tokens, const BF16* wte,
                                       const BF16* wpe, int B, int T, int C, int v0, int Vl) = 0;
  // dwte[Vl,C] += the rows of dout whose token falls in [v0, v0 + Vl) (at row token - v0), in
  // position order; dwpe[T,C] += sum over b of dout (may be null).
  virtual void embedding_backward_shard(float* dwte, float* dwpe, const BF16* dout,
                                        const int32_t* tokens_host, int B, int T, int C, int v0,
                                        int Vl) = 0;
  // out[n] = a[n] + b[n], rounded once (a pipeline stage's output: the last residual add).
  virtual void residual_forward(BF16* out, const BF16* a, const BF16* b, int64_t n) = 0;
  // out[N,C] = (inp - mean) * rstd * weight + bias; saves mean[N], rstd[N] (fp32).
  virtual void layernorm_forward(BF16* out, float* mean, float* rstd, const BF16* inp,
                                 const BF16* weight, const BF16* bias, int N, int C) = 0;
  // residual = a + b (rounded), then out = layernorm(residual), in one pass.
  virtual void fused_residual_layernorm_forward(BF16* residual, BF16* out, float* mean, float* rstd,
                                                const BF16* a, const BF16* b, const BF16* weight,
                                                const BF16* bias, int N, int C) = 0;
  // dinp[N,C] += (bf16), dweight[C] += and dbias[C] += (fp32).
  virtual void layernorm_backward(BF16* dinp, float* dweight, float* dbias, const BF16* dout,
                                  const BF16* inp, const BF16* weight, const float* mean,
                                  const float* rstd, int N, int C) = 0;
  // out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias (bias may be null). With pre_gelu non-null:
  // pre_gelu = that sum and out = gelu(pre_gelu) (tanh approximation).
  virtual void linear_forward(BF16* out, BF16* pre_gelu, const BF16* inp, const BF16* weight,
                              const BF16* bias, int N, int IC, int OC) = 0;
  // dinp[N,IC] = dout @ weight (written), times gelu'(gelu_pre) when gelu_pre is non-null;
  // dweight[OC,IC] += dout^T @ inp; dbias[OC] += column sums of dout. Each output may be null.
  virtual void linear_backward(BF16* dinp, float* dweight, float* dbias, const BF16* dout,
                               const BF16* inp, const BF16* weight, const BF16* gelu_pre, int N,
                               int IC, int OC) = 0;
  // Causal self-attention core. qkv[B,T,3C] (q, k, v side by side, head h in columns
  // [h*HS, (h+1)*HS) of each); out[B,T,C]; lse[B,NH,T] (fp32) = logsumexp over j <= t of
  // q_t . k_j / sqrt(HS), what the backward needs instead of the T x T probabilities.
  virtual void attention_forward(BF16* out, float* lse, const BF16* qkv, int B, int T, int C,
                                 int NH) = 0;
  // dqkv[B,T,3C] = the gradient through the attention core (written).
  virtual void attention_backward(BF16* dqkv, const BF16* dout, const BF16* qkv, const BF16* out,
                                  const float* lse, int B, int T, int C, int NH) = 0;
  // Whether attention_* takes heads of size C / NH.
  virtual bool attention_supports(int C, int NH) const = 0;
  // losses[N] (fp32) = -log softmax(logits[n, :V])[targets[n]]; logits[N,Vp] overwritten with
  // dloss * (softmax - onehot(target)), 0 in the padding columns and in ignored rows (target < 0).
  virtual void softmax_cross_entropy(float* losses, BF16* logits, const int32_t* targets,
                                     float dloss, int N, int V, int Vp) = 0;
  // ---- vocabulary-parallel cross-entropy (Megatron-LM; the one algorithm of every engine and
  // its arithmetic: kernels/vocab_parallel_ce.h): logits[N,Vl] are this rank's columns
  // [v0, v0 + Vl) of the padded vocabulary; Vv = the real ones among them, max(0, min(Vl, V - v0))
  // (the rest is padding). Two ops around an all-gather of the statistics over the tp group.
  // stats[N,3] (fp32) = per row, over the Vv real columns: the max m, the sum of exp(x - m), and
  // the logit of targets[n] when v0 <= target < v0 + Vv (else 0).
  virtual void cross_entropy_shard_stats(float* stats, const BF16* logits, const int32_t* targets,
                                         int N, int Vl, int Vv, int v0) = 0;
  // From every rank's stats (all_stats[tp,N,3], rank order), vocab_ce::totals: lse =
  // M + log(sum_r s_r exp(m_r - M)), M = max_r m_r; losses[N] = lse - (sum_r target logit_r) (0
  // for ignored rows, target < 0; NaN for a target >= V); logits overwritten with
  // dloss * (exp(x - lse) - onehot(target - v0)) in the Vv real columns, 0 in the padding and in
  // ignored rows. With tp = 1 and v0 = 0 this is
  // softmax_cross_entropy's result.
  virtual void cross_entropy_shard_finish(float* losses, BF16* logits, const float* all_stats,
                                          int tp, const int32_t* targets, float dloss, int N, int V,
                                          int Vl, int Vv, int v0) = 0;
  // sum of x[i]^2 in double; waits for the result.
  virtual double sum_squares(const float* x, int64_t n) = 0;

  // ---- AdamW over many tensors ---------------------------------------------------------------
  // AdamW (Loshchilov & Hutter 2019) with bias correction, as ops.inc's adamw_update; params16
  // (may be null) receives the updated weights rounded to bf16: the copy the next forward reads.
  struct AdamWSegment {
    float* params;
    const float* grads;
    float* m;
    float* v;
    BF16* params16;
    int64_t n;
    float weight_decay;
  };
  class AdamW {
   public:
    virtual ~AdamW() = default;
    // One update of every segment at step t >= 1, gradients multiplied by grad_scale first (the
    // clipping factor).
    virtual void step(float lr, float beta1, float beta2, float eps, int t, float grad_scale) = 0;
  };
  // Plans the update of `segments` once (the CUDA backend uploads its chunk table); the plan lives
  // no longer than the backend.
  virtual std::unique_ptr<AdamW> plan_adamw(std::span<const AdamWSegment> segments) = 0;

  // ---- measuring -------------------------------------------------------------------------------
  // Seconds per linear_forward of bf16 [N,IC] x [OC,IC]^T on this backend, the median over `reps`
  // calls after a warm-up (buffers of its own, released after): the GEMM ceiling that model FLOP/s
  // are compared with.
  virtual double linear_forward_seconds(int N, int IC, int OC, int reps) = 0;
};

// The host implementation (cpu/mixed_host.cc).
std::unique_ptr<MixedBackend> make_host_mixed_backend();

}  // namespace weft::kernels
