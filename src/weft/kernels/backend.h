#pragma once
// THE backend contract of weft (DESIGN.md §2, kernels/): every op a GPT-2 step runs, on one
// device's memory, under one precision policy (core/dtype.h, Precision):
//   FP32       activations, weights, gradients and AdamW state in fp32;
//   BF16Mixed  activations and a copy of the weights in bf16; master weights, parameter gradients
//              and AdamW state in fp32; every product and reduction accumulates in fp32
//              (Micikevicius et al. 2018, "Mixed Precision Training").
// Whatever the policy, master weights and parameter gradients are fp32 (float*); activations and
// the weights the forward reads are the backend's activation type, `Act` (float under FP32, BF16
// under BF16Mixed): opaque above the backend, so that no caller does element arithmetic on it
// without asking act_bytes().
//
// Three implementations:
//   make_host_backend(Precision::FP32) (cpu/host_fp32.cc, named "host"): the optimized CPU kernels
//     of ops.inc (OpenMP + oneDNN GEMM), on host memory;
//   make_host_backend(Precision::BF16Mixed) (cpu/host_bf16.cc): the bf16 ops on host memory with
//     rounding at the points the GPU rounds, computed in fp32 by the CPU kernels. It tests the
//     mixed-precision orchestration on machines without a GPU and is the reference the GPU
//     backend is checked against;
//   cuda::make_mixed_backend (cuda/mixed_backend.h): the GPU in BF16Mixed, through the kernels of
//     kernels_cuda.h, on device memory from one Arena.
// The readable reference templates (tests/support/kernel_reference.h) stay the oracle of all three.
//
// Conventions: every pointer is the backend's memory, allocated by allocate(); row-major; N = B*T
// rows. Gradients follow the one rule of every backend (docs/training.md, "Gradients: written or
// accumulated", says why): activation gradients are WRITTEN (each has one producer), except
// layernorm_backward's dinp, which ADDS into the residual stream's gradient; fp32 parameter
// gradients ADD, so microbatches accumulate. Ops run in order; the calls that return a host value
// (download, sum_squares) wait for everything before them.

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "weft/core/check.h"
#include "weft/core/dtype.h"
#include "weft/kernels/kernels.h"

struct CUstream_st;  // cudaStream_t's type, declared without CUDA's headers

namespace weft::kernels {

// An activation element: float on an FP32 backend, BF16 on a BF16Mixed one. Never defined.
struct Act;

// `elements` activation elements of `act_bytes` each (Backend::act_bytes()) past p: the one
// pointer arithmetic on the opaque type.
inline Act* act_offset(Act* p, int64_t elements, int64_t act_bytes) {
  return reinterpret_cast<Act*>(reinterpret_cast<char*>(p) + elements * act_bytes);
}
inline const Act* act_offset(const Act* p, int64_t elements, int64_t act_bytes) {
  return reinterpret_cast<const Act*>(reinterpret_cast<const char*>(p) + elements * act_bytes);
}

// ---- AdamW plan tables (every backend's contract; priced by model/memory.cc) ------------------
// The CUDA AdamW runs one launch over every tensor (Apex's multi_tensor_apply): a segment list and
// a chunk table of kAdamWChunk-element chunks that never straddle two segments, one thread block
// per chunk (kernels_cuda.h, AdamWPlan). Sized from a capacity: at most `segments` segments over at
// most `elements` elements in all, so at most elements / kAdamWChunk + segments chunks (each
// segment adds at most one partial chunk).
struct AdamWCapacity {
  int64_t segments = 0;
  int64_t elements = 0;
};
inline constexpr int64_t kAdamWChunk = 4096;
inline constexpr int64_t kAdamWSegmentRecordBytes = 56;  // cuda::AdamWSegment
inline constexpr int64_t kAdamWChunkRecordBytes = 16;    // cuda::Chunk
// The two blocks a plan takes: {segment list, chunk table}, in bytes.
struct AdamWTableBytes {
  int64_t segments = 0, chunks = 0;
};
inline AdamWTableBytes adamw_table_bytes(AdamWCapacity c) {
  return {c.segments * kAdamWSegmentRecordBytes,
          (c.elements / kAdamWChunk + c.segments) * kAdamWChunkRecordBytes};
}

class Backend {
 public:
  virtual ~Backend() = default;

  // "host" (either precision) or "cuda:0 (NVIDIA H200)".
  virtual std::string name() const = 0;
  virtual Precision precision() const = 0;
  // Bytes of one Act.
  int64_t act_bytes() const { return precision() == Precision::FP32 ? 4 : 2; }

  // ---- memory ----------------------------------------------------------------------------------
  // `bytes` of the backend's memory, 256-byte aligned, contents undefined, owned by the backend
  // until it is destroyed. Throws weft::Error when the backend's memory is exhausted.
  virtual void* allocate(int64_t bytes) = 0;
  template <typename T>
  T* allocate(int64_t count) {
    return static_cast<T*>(allocate(count * static_cast<int64_t>(sizeof(T))));
  }
  virtual int64_t allocated_bytes() const = 0;
  // Whether allocate()'s memory is host memory the caller may read and write directly (the host
  // fp32 backend), so that a copy through upload/download can be skipped. The host bf16 backend
  // says no: it emulates a device.
  virtual bool host_memory() const = 0;
  // Host <-> backend copies; they wait until the copy is complete.
  virtual void upload(void* dst, const void* host_src, int64_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, int64_t bytes) = 0;
  // A host -> backend copy that does not wait for the backend: it lands in order with the ops
  // queued before and after it, and host_src may be reused once the call returns (a microbatch's
  // tokens, so that a step's microbatches cost no host wait on a device: the CUDA backend stages
  // them through pinned host memory).
  virtual void upload_async(void* dst, const void* host_src, int64_t bytes) = 0;
  // Snapshots for asynchronous checkpoints (runtime/checkpointing.h): host memory to hold a copy
  // of the training state, page-locked on CUDA so that a download runs at the link's bandwidth
  // (ordinary host memory on the host backends); freed when the last owner lets go.
  // The host backends' is mapped, not taken from the heap (a snapshot is hundreds of MiB to many
  // GiB), in huge pages where the kernel allows them (madvise): touching a fresh page costs a
  // fault, and 1.5 GB took 6.5 s to first fill in 4 KiB pages on this machine's VM, 2.3 s in huge
  // pages, 0.11 s once resident (so the caller fills it once, before training needs it).
  virtual std::shared_ptr<void> allocate_host(int64_t bytes) {
    WEFT_CHECK(bytes >= 0, "negative host allocation of ", bytes, " bytes");
    const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    WEFT_CHECK(p != MAP_FAILED, "host memory exhausted: a snapshot of ", bytes, " bytes");
    (void)::madvise(p, size, MADV_HUGEPAGE);
    return {p, [size](void* q) { ::munmap(q, size); }};
  }
  // A backend -> host copy that does not make the host wait: it reads src after the ops queued
  // before it and beside the ops queued after it (CUDA: on a side stream), and is complete once
  // wait_downloads() returns. An op that overwrites src must be queued after
  // order_after_downloads() (the optimizer's update: the snapshot holds the step it was taken at).
  // The host backends copy at once, so both waits are free.
  virtual void download_async(void* host_dst, const void* src, int64_t bytes) {
    download(host_dst, src, bytes);
  }
  virtual void wait_downloads() {}
  virtual void order_after_downloads() {}
  virtual void zero(void* p, int64_t bytes) = 0;
  // Within the backend's memory, in order with the ops.
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void synchronize() = 0;
  // The CUDA stream the backend's work runs on, in order (an opaque cudaStream_t), or null where
  // there is none (the host backends). A communicator on the backend's memory runs on it or orders
  // itself against it (comm/cuda): the CUDA backend's stream is non-blocking, so the legacy
  // default stream does not wait for its kernels, and copies there raced with them (the H200,
  // 2026-12-04: tp=2 with sequence parallelism on one GPU gave different losses run to run).
  virtual CUstream_st* cuda_stream() const { return nullptr; }

  // ---- ops -------------------------------------------------------------------------------------
  // out[n] = in[n] as an Act (bf16: rounded to nearest even; fp32: copied unless out == in).
  virtual void convert(Act* out, const float* in, int64_t n) = 0;
  // out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :]
  virtual void embedding_forward(Act* out, const int32_t* tokens, const Act* wte, const Act* wpe,
                                 int B, int T, int C) = 0;
  // dwte[V,C] += rows of dout scattered by token; dwpe[T,C] += sum over b. tokens_host: the same
  // ids in host memory (the data loader has them), so no copy back is needed.
  virtual void embedding_backward(float* dwte, float* dwpe, const Act* dout,
                                  const int32_t* tokens_host, int B, int T, int C) = 0;
  // ---- vocabulary-parallel embedding (Megatron-LM: tensor-parallel rank r holds rows
  // [v0, v0 + Vl) of wte) ---------------------------------------------------------------------
  // out[B,T,C] = (v0 <= token < v0 + Vl ? wte[token - v0, :] : 0) + (wpe ? wpe[t, :] : 0), rounded
  // once: this rank's partial sum of the embedding (the ranks' partials add up to
  // embedding_forward's output; tp rank 0 passes wpe, the others null).
  virtual void embedding_forward_shard(Act* out, const int32_t* tokens, const Act* wte,
                                       const Act* wpe, int B, int T, int C, int v0, int Vl) = 0;
  // dwte[Vl,C] += the rows of dout whose token falls in [v0, v0 + Vl) (at row token - v0), in
  // position order; dwpe[T,C] += sum over b of dout (may be null).
  virtual void embedding_backward_shard(float* dwte, float* dwpe, const Act* dout,
                                        const int32_t* tokens_host, int B, int T, int C, int v0,
                                        int Vl) = 0;
  // out[n] = a[n] + b[n], rounded once (a pipeline stage's output: the last residual add).
  virtual void residual_forward(Act* out, const Act* a, const Act* b, int64_t n) = 0;
  // ---- normalization over the last dim (norm: LayerNorm or RMSNorm, and its epsilon) ----------
  // LayerNorm (Ba et al. 2016): out[N,C] = (inp - mean) * rstd * weight + bias, rstd =
  // 1/sqrt(var + eps), biased variance; saves mean[N], rstd[N] (fp32). bias may be null (none).
  // RMSNorm (Zhang & Sennrich 2019, Llama): out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) +
  // eps); saves rstd[N]; mean and bias are null.
  virtual void layernorm_forward(Act* out, float* mean, float* rstd, const Act* inp,
                                 const Act* weight, const Act* bias, int N, int C,
                                 Norm norm = {}) = 0;
  // residual = a + b (rounded), then out = layernorm(residual), in one pass.
  virtual void fused_residual_layernorm_forward(Act* residual, Act* out, float* mean, float* rstd,
                                                const Act* a, const Act* b, const Act* weight,
                                                const Act* bias, int N, int C, Norm norm = {}) = 0;
  // dinp[N,C] += (Act), dweight[C] += and dbias[C] += (fp32; dbias null when there is no bias,
  // and always under RMSNorm, whose mean is null too).
  virtual void layernorm_backward(Act* dinp, float* dweight, float* dbias, const Act* dout,
                                  const Act* inp, const Act* weight, const float* mean,
                                  const float* rstd, int N, int C, Norm norm = {}) = 0;
  // out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias (bias may be null). With pre_gelu non-null:
  // pre_gelu = that sum and out = gelu(pre_gelu) (tanh approximation).
  virtual void linear_forward(Act* out, Act* pre_gelu, const Act* inp, const Act* weight,
                              const Act* bias, int N, int IC, int OC) = 0;
  // dinp[N,IC] = dout @ weight (written), times gelu'(gelu_pre) when gelu_pre is non-null;
  // dweight[OC,IC] += dout^T @ inp; dbias[OC] += column sums of dout. Each output may be null.
  virtual void linear_backward(Act* dinp, float* dweight, float* dbias, const Act* dout,
                               const Act* inp, const Act* weight, const Act* gelu_pre, int N,
                               int IC, int OC) = 0;
  // SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"; Llama's MLP): inp[N,2F] holds the
  // gate in columns [0, F) and the up projection in [F, 2F); out[N,F] = silu(gate) * up, silu(x) =
  // x / (1 + exp(-x)), computed in fp32 and rounded once.
  virtual void swiglu_forward(Act* out, const Act* inp, int N, int F) = 0;
  // dinp[N,2F] (written) = the gradient through swiglu_forward of dout[N,F].
  virtual void swiglu_backward(Act* dinp, const Act* dout, const Act* inp, int N, int F) = 0;
  // Rotary position embedding (Su et al. 2021, "RoFormer"), in place on the q and k heads of
  // qkv[B,T,(NH+2*NKV)*HS] (q: NH heads, then k: NKV heads, then v, untouched). Row (b, t) is
  // rotated by the angles of position t, in the rotate-half pairing of GPT-NeoX, Megatron-LM and
  // Hugging Face's Llama: within a head, elements i and i + HS/2 (i < HS/2) form the pair
  //   (x1, x2) -> (x1 cos a - x2 sin a, x2 cos a + x1 sin a),  a = t * theta^(-2i/HS),
  // computed in fp32 (the angle in double) and rounded once. inverse: rotates by -a, which is the
  // backward (a rotation's transpose is its inverse), applied to dqkv in place.
  virtual void rope(Act* qkv, int B, int T, int NH, int NKV, int HS, float theta, bool inverse) = 0;
  // Causal self-attention core, grouped-query (Ainslie et al. 2023): qkv[B,T,(NH+2*NKV)*HS] holds
  // q (NH heads), k and v (NKV heads each) side by side, HS = C/NH; query head h reads key/value
  // head h / (NH/NKV) (NKV == NH: multi-head; NKV == 1: multi-query). out[B,T,C]; saved (fp32,
  // attention_saved_floats of them): what the backward needs. The host fp32 backend saves the
  // probabilities att[B,NH,T,T] (entries j > t are 0); the bf16 backends save lse[B,NH,T] =
  // logsumexp over j <= t of q_t . k_j / sqrt(HS) (FlashAttention-2: the backward recomputes the
  // probabilities from it).
  virtual void attention_forward(Act* out, float* saved, const Act* qkv, int B, int T, int C,
                                 int NH, int NKV) = 0;
  virtual int64_t attention_saved_floats(int B, int T, int NH) const = 0;
  // dqkv[B,T,(NH+2*NKV)*HS] = the gradient through the attention core (written; a key/value
  // head's gradient sums over the query heads that read it).
  virtual void attention_backward(Act* dqkv, const Act* dout, const Act* qkv, const Act* out,
                                  const float* saved, int B, int T, int C, int NH, int NKV) = 0;
  // Whether attention_* takes heads of size C / NH.
  virtual bool attention_supports(int C, int NH) const = 0;
  // losses[N] (fp32) = -log softmax(logits[n, :V])[targets[n]]; logits[N,Vp] overwritten with
  // dloss * (softmax - onehot(target)), 0 in the padding columns and in ignored rows (target < 0).
  virtual void softmax_cross_entropy(float* losses, Act* logits, const int32_t* targets,
                                     float dloss, int N, int V, int Vp) = 0;
  // ---- vocabulary-parallel cross-entropy (Megatron-LM; the one algorithm of every engine and
  // its arithmetic: kernels/vocab_parallel_ce.h): logits[N,Vl] are this rank's columns
  // [v0, v0 + Vl) of the padded vocabulary; Vv = the real ones among them, max(0, min(Vl, V - v0))
  // (the rest is padding). Two ops around an all-gather of the statistics over the tp group.
  // stats[N,3] (fp32) = per row, over the Vv real columns: the max m, the sum of exp(x - m), and
  // the logit of targets[n] when v0 <= target < v0 + Vv (else 0).
  virtual void cross_entropy_shard_stats(float* stats, const Act* logits, const int32_t* targets,
                                         int N, int Vl, int Vv, int v0) = 0;
  // From every rank's stats (all_stats[tp,N,3], rank order), vocab_ce::totals: lse =
  // M + log(sum_r s_r exp(m_r - M)), M = max_r m_r; losses[N] = lse - (sum_r target logit_r) (0
  // for ignored rows, target < 0; NaN for a target >= V); logits overwritten with
  // dloss * (exp(x - lse) - onehot(target - v0)) in the Vv real columns, 0 in the padding and in
  // ignored rows. With tp = 1 and v0 = 0 this is
  // softmax_cross_entropy's result.
  virtual void cross_entropy_shard_finish(float* losses, Act* logits, const float* all_stats,
                                          int tp, const int32_t* targets, float dloss, int N, int V,
                                          int Vl, int Vv, int v0) = 0;
  // sum of x[i]^2 in double; waits for the result.
  virtual double sum_squares(const float* x, int64_t n) = 0;
  // sum[0] += float(s / count), s = the sum of x[0, n) in double (the host's in index order),
  // without a host wait: a microbatch's mean loss added to its step's total in the backend's
  // memory (the losses of ignored rows are 0, so n may cover them with count the rest; the
  // rounding to float is model::Gpt::mean_loss's). count > 0.
  virtual void add_mean(double* sum, const float* x, int64_t n, int64_t count) = 0;
  // dst[n] += src[n], fp32: a ZeRO shard's gradient summed over microbatches, the tied embedding's
  // two copies summed (optim/distributed_optimizer.h, runtime/train_step.h).
  virtual void accumulate(float* dst, const float* src, int64_t n) = 0;

  // ---- AdamW over many tensors ---------------------------------------------------------------
  // AdamW (Loshchilov & Hutter 2019) with bias correction, as ops.inc's adamw_update; params16
  // (may be null) receives the updated weights rounded to bf16: the copy the next forward reads on
  // a BF16Mixed backend (null on an FP32 one, whose forward reads params themselves).
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
  // Plans the update of `segments` once; the plan lives no longer than the backend. A BF16Mixed
  // backend takes adamw_table_bytes(capacity) from its memory for it: the CUDA backend uploads its
  // segment list and chunk table there, and the host-bf16 backend takes the same blocks, as it
  // emulates the device's memory. The capacity, not the segments, sizes them, so the memory model
  // prices them before any segment exists (model/memory.h).
  virtual std::unique_ptr<AdamW> plan_adamw(std::span<const AdamWSegment> segments,
                                            AdamWCapacity capacity) = 0;
  // With the segments' own capacity.
  std::unique_ptr<AdamW> plan_adamw(std::span<const AdamWSegment> segments) {
    AdamWCapacity c{.segments = static_cast<int64_t>(segments.size())};
    for (const AdamWSegment& s : segments) c.elements += s.n;
    return plan_adamw(segments, c);
  }

  // ---- measuring -------------------------------------------------------------------------------
  // Seconds per linear_forward of [N,IC] x [OC,IC]^T (Act) on this backend, the median over `reps`
  // calls after a warm-up (buffers of its own, released after): the GEMM ceiling that model FLOP/s
  // are compared with.
  virtual double linear_forward_seconds(int N, int IC, int OC, int reps) = 0;
};

// What a host backend's block of `bytes` holds resident once written: blocks from 2 MiB on are
// whole transparent huge pages (cpu/host_backend.h), smaller ones their bytes. The memory model's
// count of host memory (model/memory.cc).
inline constexpr int64_t kHugePageBytes = int64_t{2} << 20;  // x86-64
inline int64_t host_resident_bytes(int64_t bytes) {
  return bytes >= kHugePageBytes ? (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes
                                 : bytes;
}

// The host implementations: FP32 (cpu/host_fp32.cc) or BF16Mixed (cpu/host_bf16.cc).
std::unique_ptr<Backend> make_host_backend(Precision precision);
// The process's host FP32 backend, for models given no backend of their own. It holds no state a
// caller could disturb (its allocations live until the process ends: allocate from a backend of
// your own).
Backend& host_fp32();

// A backend written with typed pointers: Impl implements every op with A (float or BF16) in place
// of Act, under the same names; this class casts. Impl also implements the memory calls, name(),
// attention_supports, attention_saved_floats, sum_squares, plan_adamw and
// linear_forward_seconds.
template <typename Impl, typename A>
class TypedBackend : public Backend {
 public:
  Precision precision() const final {
    return sizeof(A) == 4 ? Precision::FP32 : Precision::BF16Mixed;
  }
  void convert(Act* out, const float* in, int64_t n) final { self().convert(t(out), in, n); }
  void embedding_forward(Act* out, const int32_t* tokens, const Act* wte, const Act* wpe, int B,
                         int T, int C) final {
    self().embedding_forward(t(out), tokens, t(wte), t(wpe), B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const Act* dout, const int32_t* tokens_host,
                          int B, int T, int C) final {
    self().embedding_backward(dwte, dwpe, t(dout), tokens_host, B, T, C);
  }
  void embedding_forward_shard(Act* out, const int32_t* tokens, const Act* wte, const Act* wpe,
                               int B, int T, int C, int v0, int Vl) final {
    self().embedding_forward_shard(t(out), tokens, t(wte), t(wpe), B, T, C, v0, Vl);
  }
  void embedding_backward_shard(float* dwte, float* dwpe, const Act* dout,
                                const int32_t* tokens_host, int B, int T, int C, int v0,
                                int Vl) final {
    self().embedding_backward_shard(dwte, dwpe, t(dout), tokens_host, B, T, C, v0, Vl);
  }
  void residual_forward(Act* out, const Act* a, const Act* b, int64_t n) final {
    self().residual_forward(t(out), t(a), t(b), n);
  }
  void layernorm_forward(Act* out, float* mean, float* rstd, const Act* inp, const Act* weight,
                         const Act* bias, int N, int C, Norm norm) final {
    self().layernorm_forward(t(out), mean, rstd, t(inp), t(weight), t(bias), N, C, norm);
  }
  void fused_residual_layernorm_forward(Act* residual, Act* out, float* mean, float* rstd,
                                        const Act* a, const Act* b, const Act* weight,
                                        const Act* bias, int N, int C, Norm norm) final {
    self().fused_residual_layernorm_forward(t(residual), t(out), mean, rstd, t(a), t(b), t(weight),
                                            t(bias), N, C, norm);
  }
  void layernorm_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                          const Act* weight, const float* mean, const float* rstd, int N, int C,
                          Norm norm) final {
    self().layernorm_backward(t(dinp), dweight, dbias, t(dout), t(inp), t(weight), mean, rstd, N, C,
                              norm);
  }
  void linear_forward(Act* out, Act* pre_gelu, const Act* inp, const Act* weight, const Act* bias,
                      int N, int IC, int OC) final {
    self().linear_forward(t(out), t(pre_gelu), t(inp), t(weight), t(bias), N, IC, OC);
  }
  void linear_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                       const Act* weight, const Act* gelu_pre, int N, int IC, int OC) final {
    self().linear_backward(t(dinp), dweight, dbias, t(dout), t(inp), t(weight), t(gelu_pre), N, IC,
                           OC);
  }
  void swiglu_forward(Act* out, const Act* inp, int N, int F) final {
    self().swiglu_forward(t(out), t(inp), N, F);
  }
  void swiglu_backward(Act* dinp, const Act* dout, const Act* inp, int N, int F) final {
    self().swiglu_backward(t(dinp), t(dout), t(inp), N, F);
  }
  void rope(Act* qkv, int B, int T, int NH, int NKV, int HS, float theta, bool inverse) final {
    self().rope(t(qkv), B, T, NH, NKV, HS, theta, inverse);
  }
  void attention_forward(Act* out, float* saved, const Act* qkv, int B, int T, int C, int NH,
                         int NKV) final {
    self().attention_forward(t(out), saved, t(qkv), B, T, C, NH, NKV);
  }
  void attention_backward(Act* dqkv, const Act* dout, const Act* qkv, const Act* out,
                          const float* saved, int B, int T, int C, int NH, int NKV) final {
    self().attention_backward(t(dqkv), t(dout), t(qkv), t(out), saved, B, T, C, NH, NKV);
  }
  void softmax_cross_entropy(float* losses, Act* logits, const int32_t* targets, float dloss, int N,
                             int V, int Vp) final {
    self().softmax_cross_entropy(losses, t(logits), targets, dloss, N, V, Vp);
  }
  void cross_entropy_shard_stats(float* stats, const Act* logits, const int32_t* targets, int N,
                                 int Vl, int Vv, int v0) final {
    self().cross_entropy_shard_stats(stats, t(logits), targets, N, Vl, Vv, v0);
  }
  void cross_entropy_shard_finish(float* losses, Act* logits, const float* all_stats, int tp,
                                  const int32_t* targets, float dloss, int N, int V, int Vl, int Vv,
                                  int v0) final {
    self().cross_entropy_shard_finish(losses, t(logits), all_stats, tp, targets, dloss, N, V, Vl,
                                      Vv, v0);
  }

 protected:
  static A* t(Act* p) { return reinterpret_cast<A*>(p); }
  static const A* t(const Act* p) { return reinterpret_cast<const A*>(p); }
  Impl& self() { return static_cast<Impl&>(*this); }
};

}  // namespace weft::kernels
