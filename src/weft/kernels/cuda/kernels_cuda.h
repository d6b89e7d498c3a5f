#pragma once
// weft's CUDA kernels (docs/cuda.md): the mixed-precision kernels behind the CUDA Backend
// (mixed_backend.cc; Micikevicius et al. 2018, "Mixed Precision Training"). Every pointer is
// device memory. Activations and a copy of the weights are bf16, master weights, parameter
// gradients and AdamW state fp32; every matrix product and every reduction accumulates in fp32
// (sums of squares in double). Gradients follow ops.inc's rule (docs/training.md): bf16
// activation gradients are WRITTEN (each has one producer), except LayerNorm's dinp, which ADDS
// into the residual stream's gradient; fp32 parameter gradients ADD, so microbatches accumulate.
// Kernels that need cuBLASLt or scratch memory take a Context (its stream); the others take the
// stream directly (default: the default stream). The CPU reference
// (tests/support/kernel_reference.h) is the oracle of each (tests/kernels/cuda_kernels_test.cc).
//
// Shapes are checked on entry (WEFT_CHECK); flash attention also needs 16-byte aligned tensors and
// a head size HS = C / NH of 64 or 128.

#include <cstdint>
#include <span>

#include "weft/core/dtype.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/cuda/arena.h"
#include "weft/kernels/cuda/context.h"

namespace weft::kernels::cuda {

// out[n] = in[n] rounded to bf16 (to nearest even; NaN stays NaN).
void convert(BF16* out, const float* in, int64_t n, Stream stream = nullptr);

// ---- token + position embedding --------------------------------------------------------------
// out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :]   (bf16 weight copies)
void embedding_forward(BF16* out, const int32_t* tokens, const BF16* wte, const BF16* wpe, int B,
                       int T, int C, Stream stream = nullptr);
// dwte[V,C] += scatter of dout rows by token; dwpe[T,C] += sum over b (fp32). Deterministic: each
// token's rows are summed in position order, planned on the host from tokens_host[B*T] (the ids
// the device copy holds, which the data loader has anyway), so no copy back is needed.
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const BF16* dout,
                        const int32_t* tokens_host, int B, int T, int C);

// Vocabulary-parallel (Megatron-LM; backend.h): a tensor-parallel rank holds rows [v0, v0 + Vl) of
// wte. out[B,T,C] = (v0 <= token < v0 + Vl ? wte[token - v0, :] : 0) + (wpe ? wpe[t, :] : 0),
// rounded once: this rank's partial sum of embedding_forward's output (wpe may be null).
void embedding_forward_shard(BF16* out, const int32_t* tokens, const BF16* wte, const BF16* wpe,
                             int B, int T, int C, int v0, int Vl, Stream stream = nullptr);
// dwte[Vl,C] += the dout rows whose token is in [v0, v0 + Vl), at row token - v0, each row's sum
// the one embedding_backward forms (host_plans.h: group_tokens_in_range); dwpe[T,C] += sum over b
// of every position (dwpe may be null).
void embedding_backward_shard(Context& ctx, float* dwte, float* dwpe, const BF16* dout,
                              const int32_t* tokens_host, int B, int T, int C, int v0, int Vl);

// ---- LayerNorm or RMSNorm over the last dim (statistics in fp32; backend.h states both) -------
// LayerNorm: out[N,C] = (inp - mean) * rstd * weight + bias (bias may be null); saves mean[N],
// rstd[N] (fp32), rstd = 1/sqrt(var + norm.eps). RMSNorm (norm.rms): out = inp * rstd * weight,
// rstd = 1/sqrt(mean(inp^2) + norm.eps); saves rstd[N]; mean and bias null.
void layernorm_forward(BF16* out, float* mean, float* rstd, const BF16* inp, const BF16* weight,
                       const BF16* bias, int N, int C, Norm norm, Stream stream = nullptr);
// The residual add fused in front: residual[N,C] = a + b (rounded to bf16), then
// out = layernorm(residual) exactly as layernorm_forward(residual). One pass instead of two.
void fused_residual_layernorm_forward(BF16* residual, BF16* out, float* mean, float* rstd,
                                      const BF16* a, const BF16* b, const BF16* weight,
                                      const BF16* bias, int N, int C, Norm norm,
                                      Stream stream = nullptr);
// dinp[N,C] += (bf16, the residual stream's gradient), dweight[C] +=, dbias[C] += (fp32,
// deterministic: fixed row splits summed in a fixed order; dbias may be null, and is under
// RMSNorm, whose mean is null too).
void layernorm_backward(Context& ctx, BF16* dinp, float* dweight, float* dbias, const BF16* dout,
                        const BF16* inp, const BF16* weight, const float* mean, const float* rstd,
                        int N, int C, Norm norm);

// ---- SwiGLU (backend.h)
// -------------------------------------------------------------------------- out[N,F] = silu(inp[:,
// :F]) * inp[:, F:2F], in fp32, rounded once.
void swiglu_forward(BF16* out, const BF16* inp, int N, int F, Stream stream = nullptr);
// dinp[N,2F] (written) = the gradient through swiglu_forward of dout[N,F].
void swiglu_backward(BF16* dinp, const BF16* dout, const BF16* inp, int N, int F,
                     Stream stream = nullptr);

// ---- rotary position embedding (backend.h, Backend::rope) ---------------------------------------
// In place on the first NH + NKV heads (q, k) of qkv[B,T,(NH+2*NKV)*HS]; inverse: the backward.
// HS even, at most 512.
void rope(BF16* qkv, int B, int T, int NH, int NKV, int HS, float theta, bool inverse,
          Stream stream = nullptr);

// ---- linear, through cuBLASLt (bf16 inputs, fp32 accumulation) --------------------------------
// out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias[OC] (bias may be null). With pre_gelu non-null,
// pre_gelu = that sum and out = gelu(pre_gelu) (the MLP's first layer; pre_gelu is what the
// backward needs). Bias and GeLU run in the GEMM's epilogue when cuBLASLt has one for the shape,
// else in a separate kernel.
void linear_forward(Context& ctx, BF16* out, BF16* pre_gelu, const BF16* inp, const BF16* weight,
                    const BF16* bias, int N, int IC, int OC);
// dinp[N,IC] = dout @ weight, times gelu'(gelu_pre[N,IC]) when gelu_pre is non-null (the gradient
// through the GeLU that produced this layer's input, fused into the GEMM's epilogue);
// dweight[OC,IC] += dout^T @ inp and dbias[OC] += sum_n dout (fp32). dinp, dweight and dbias may
// each be null (a zero-bubble schedule splits the input and weight gradients).
void linear_backward(Context& ctx, BF16* dinp, float* dweight, float* dbias, const BF16* dout,
                     const BF16* inp, const BF16* weight, const BF16* gelu_pre, int N, int IC,
                     int OC);

// ---- residual, element-wise ------------------------------------------------------------------
// out = a + b, rounded once (out may alias a).
void residual_forward(BF16* out, const BF16* a, const BF16* b, int64_t n, Stream stream = nullptr);
// The same in fp32: Backend::accumulate (dst += src).
void residual_forward(float* out, const float* a, const float* b, int64_t n,
                      Stream stream = nullptr);

// ---- causal self-attention: FlashAttention-2 ---------------------------------------------------
// Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning".
// Grouped-query (Ainslie et al. 2023): qkv[B,T,C+2*NKV*HS] as in ops.inc (q: NH heads, k and v:
// NKV heads each; query head h reads key/value head h / (NH/NKV)); out[B,T,C]; lse[B,NH,T]
// (fp32) = logsumexp_j<=t(q_t . k_j / sqrt(HS)), saved for the backward. Tiles of 64 queries x 64
// keys in shared memory, tensor-core products with fp32 accumulation, online softmax: the T x T
// matrix never exists in memory.
void flash_attention_forward(BF16* out, float* lse, const BF16* qkv, int B, int T, int C, int NH,
                             int NKV, Stream stream = nullptr);
// dqkv[B,T,C+2*NKV*HS] = gradient through the attention core (written), from the forward's out
// and lse. Deterministic (no atomics): one kernel owns 64 keys of one key/value head and
// accumulates their dK, dV over the query tiles of each query head of its group, head by head; a
// second owns 64 queries and accumulates dQ over the key tiles.
void flash_attention_backward(Context& ctx, BF16* dqkv, const BF16* dout, const BF16* qkv,
                              const BF16* out, const float* lse, int B, int T, int C, int NH,
                              int NKV);
// Whether flash_attention_* takes this shape (HS = C / NH of 64 or 128).
bool flash_attention_supports(int C, int NH);

// ---- fused softmax + cross-entropy over a padded vocabulary -----------------------------------
// As ops.inc's softmax_cross_entropy_fused, on bf16 logits (statistics in fp32): losses[N]
// (fp32) and logits[N,Vp] overwritten with dloss * (softmax - onehot(target)), 0 in the padding
// and in ignored rows (target < 0). A target >= V gives a NaN loss and NaN gradients.
void softmax_cross_entropy_fused(float* losses, BF16* logits, const int32_t* targets, float dloss,
                                 int N, int V, int Vp, Stream stream = nullptr);

// Vocabulary-parallel cross-entropy (Megatron-LM; backend.h): logits[N,Vl] are columns
// [v0, v0 + Vl) of the padded vocabulary, the first Vv real. stats[N,3] (fp32) = per row the max
// m, the sum of exp(x - m) over the real columns (m = -inf, s = 0 when Vv = 0), and the target's
// logit when this rank holds it (else 0).
void cross_entropy_shard_stats(float* stats, const BF16* logits, const int32_t* targets, int N,
                               int Vl, int Vv, int v0, Stream stream = nullptr);
// From all_stats[tp,N,3] (every rank's stats, rank order): losses[N] and logits overwritten with
// dloss * (softmax - onehot(target)) in the real columns, 0 in the padding and ignored rows
// (target < 0); a target >= V gives NaN. With tp = 1 and v0 = 0, softmax_cross_entropy_fused's
// expressions.
void cross_entropy_shard_finish(float* losses, BF16* logits, const float* all_stats, int tp,
                                const int32_t* targets, float dloss, int N, int V, int Vl, int Vv,
                                int v0, Stream stream = nullptr);

// ---- AdamW over many tensors in one launch ---------------------------------------------------
// AdamW (Loshchilov & Hutter 2019) with bias correction, as ops.inc's adamw_update, on fp32
// master weights and state; params16 (may be null) receives the updated weights rounded to
// bf16 in the same pass: the copy the next forward reads.
struct AdamWSegment {
  float* params;
  const float* grads;
  float* m;
  float* v;
  BF16* params16;
  int64_t n;
  float weight_decay;
};

class AdamWPlan {
 public:
  static constexpr int64_t kChunk = kAdamWChunk;  // elements per thread block (backend.h)

  // Uploads the segment list and its chunk table (host_plans.h) into the arena, once, in blocks
  // sized by `capacity` (backend.h: adamw_table_bytes, what the memory model prices); without
  // one, the segments' own.
  AdamWPlan(Arena& arena, std::span<const AdamWSegment> segments,
            AdamWCapacity capacity = {.segments = -1});
  // One launch over every segment at step t >= 1. Gradients are multiplied by grad_scale (the
  // clipping factor).
  void step(float lr, float beta1, float beta2, float eps, int t, float grad_scale = 1.f,
            Stream stream = nullptr) const;
  int64_t num_elements() const { return num_elements_; }

 private:
  const AdamWSegment* segments_;  // device
  const void* chunks_;            // device Chunk[num_chunks_]
  int64_t num_chunks_;
  int64_t num_elements_;
};

// ---- reductions ------------------------------------------------------------------------------
// *out (device) = sum of x[i]^2 in double, without waiting: a fixed two-pass tree (the grid
// depends on n only), so the result is the same bits on every run.
void sum_squares(Context& ctx, double* out, const float* x, int64_t n);
// *sum (device) += float(sum of x[0, n) in double / count), without waiting: one block's fixed
// tree, the same bits on every run (Backend::add_mean).
void add_mean(double* sum, const float* x, int64_t n, int64_t count, Stream stream);

}  // namespace weft::kernels::cuda
