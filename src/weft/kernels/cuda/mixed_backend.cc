// CudaBackend: kernels::Backend on a GPU (mixed_backend.h). Host code only (the kernels
// live in ops.cu, flash_attention.cu and linear.cc), so it goes to the C++ compiler.
//
// Ordering: every op, copy and memset runs on the backend's one stream, so they execute in call
// order. The stream is non-blocking, i.e. it does NOT wait for work on the legacy default stream;
// the one place that puts work there (AdamWPlan's constructor, whose cudaMemcpy from pageable
// memory may return before its DMA lands) is followed by a device-wide synchronization.

#include "weft/kernels/cuda/mixed_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/check.h"
#include "weft/core/clock.h"
#include "weft/core/dtype.h"
#include "weft/core/rng.h"
#include "weft/kernels/cuda/arena.h"
#include "weft/kernels/cuda/context.h"
#include "weft/kernels/cuda/cuda_check.h"
#include "weft/kernels/cuda/kernels_cuda.h"

namespace weft::kernels::cuda {
namespace {

// The plan of kernels_cuda.h behind Backend::AdamW. The backend outlives it (backend.h), so the
// stream stays valid.
class CudaAdamW final : public Backend::AdamW {
 public:
  CudaAdamW(Arena& arena, std::span<const AdamWSegment> segments, AdamWCapacity capacity,
            Stream stream)
      : plan_(arena, segments, capacity), stream_(stream) {}
  void step(float lr, float beta1, float beta2, float eps, int t, float grad_scale) override {
    plan_.step(lr, beta1, beta2, eps, t, grad_scale, stream_);
  }

 private:
  AdamWPlan plan_;
  Stream stream_;
};

// A pair of CUDA events, destroyed even when a timed call throws.
struct EventPair {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  EventPair() {
    WEFT_CUDA_CHECK(cudaEventCreate(&start));
    WEFT_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    if (start != nullptr) (void)cudaEventDestroy(start);
    if (stop != nullptr) (void)cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

class CudaBackend final : public TypedBackend<CudaBackend, BF16> {
 public:
  // The backend's own blocks: the device double sum_squares writes, one full alignment unit so
  // that the caller's blocks start where allocated_bytes() says.
  static constexpr size_t kOwnBytes = Arena::kAlignment;

  CudaBackend(int64_t arena_bytes, int device) {
    WEFT_CHECK(arena_bytes >= 0, "negative arena size ", arena_bytes);
    const int count = device_count();
    WEFT_CHECK(device >= 0 && device < count, "CUDA device ", device, " requested, ", count,
               " visible");
    // The current device is per host thread: the arena, the stream and the cuBLASLt handle are
    // created on this one, and a caller on another thread must select it too (one GPU per
    // process, as weft runs, needs nothing).
    WEFT_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    WEFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    name_ = "cuda:" + std::to_string(device) + " (" + prop.name + ")";
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    try {
      // The Context's workspace and scratch and the backend's own blocks come from the same
      // arena; one alignment unit of slack per block keeps arena_bytes usable in full.
      arena_ =
          std::make_unique<Arena>(static_cast<size_t>(arena_bytes) + Context::kDefaultWorkspace +
                                  Context::kDefaultScratch + kOwnBytes + 4 * Arena::kAlignment);
      ctx_ = std::make_unique<Context>(*arena_, stream_);
      sum_ = static_cast<double*>(arena_->allocate(kOwnBytes));
      base_ = arena_->mark();
    } catch (...) {
      release_all();
      throw;
    }
  }

  ~CudaBackend() override {
    // Work still queued may use the arena: wait for it (no throw from a destructor), then free
    // in dependency order: the cuBLASLt handle, the memory, the stream.
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    release_all();
  }

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return name_; }

  // ---- memory ----------------------------------------------------------------------------------
  void* allocate(int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "negative allocation of ", bytes, " bytes");
    return arena_->allocate(static_cast<size_t>(bytes));
  }
  bool host_memory() const override { return false; }
  CUstream_st* cuda_stream() const override { return stream_; }
  int64_t allocated_bytes() const override { return static_cast<int64_t>(arena_->used() - base_); }
  void upload(void* dst, const void* host_src, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "negative upload of ", bytes, " bytes");
    if (bytes == 0) return;
    // Pageable host memory: the runtime stages it; the wait makes the copy complete on return.
    WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, static_cast<size_t>(bytes),
                                    cudaMemcpyHostToDevice, stream_));
    synchronize();
  }
  // Through pinned staging blocks, taken in turn: the host's bytes are copied into one now, so
  // the caller may reuse them, and the DMA from it is queued on the stream without a wait (from
  // pageable memory cudaMemcpyAsync may wait for the stream). A block is reused once its last DMA
  // has run, kStagingBlocks uploads later: the host waits there only when it runs that far ahead
  // of the device.
  void upload_async(void* dst, const void* host_src, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "negative upload of ", bytes, " bytes");
    if (bytes == 0) return;
    Staging& s = staging_[next_staging_++ % kStagingBlocks];
    if (s.done == nullptr) {
      WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    } else {
      WEFT_CUDA_CHECK(cudaEventSynchronize(s.done));
    }
    if (s.bytes < bytes) {
      if (s.data != nullptr) WEFT_CUDA_CHECK(cudaFreeHost(s.data));
      s.data = nullptr;
      WEFT_CUDA_CHECK(cudaMallocHost(&s.data, static_cast<size_t>(bytes)));
      s.bytes = bytes;
    }
    std::memcpy(s.data, host_src, static_cast<size_t>(bytes));
    WEFT_CUDA_CHECK(
        cudaMemcpyAsync(dst, s.data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
    WEFT_CUDA_CHECK(cudaEventRecord(s.done, stream_));
  }
  std::shared_ptr<void> allocate_host(int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "negative host allocation of ", bytes, " bytes");
    void* p = nullptr;
    WEFT_CUDA_CHECK(cudaMallocHost(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1))));
    return {p, [](void* q) { (void)cudaFreeHost(q); }};
  }
  // On the side stream, after the ops queued so far on the backend's stream, so the next step's
  // forward and backward run beside the copy; the optimizer's update waits for it
  // (order_after_downloads).
  void download_async(void* host_dst, const void* src, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "negative download of ", bytes, " bytes");
    if (bytes == 0) return;
    if (side_ == nullptr) {
      WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
      WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming));
      WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&downloaded_, cudaEventDisableTiming));
    }
    WEFT_CUDA_CHECK(cudaEventRecord(queued_, stream_));
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(side_, queued_, 0));
    WEFT_CUDA_CHECK(
        cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, side_));
    WEFT_CUDA_CHECK(cudaEventRecord(downloaded_, side_));
    downloads_pending_ = true;
  }
  void wait_downloads() override {
    if (side_ != nullptr) WEFT_CUDA_CHECK(cudaStreamSynchronize(side_));
  }
  void order_after_downloads() override {
    if (!downloads_pending_) return;
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream_, downloaded_, 0));
    downloads_pending_ = false;
  }
  void download(void* host_dst, const void* src, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "negative download of ", bytes, " bytes");
    if (bytes == 0) return;
    WEFT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes),
                                    cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }
  void zero(void* p, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "negative zero of ", bytes, " bytes");
    if (bytes == 0) return;
    WEFT_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream_));
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    WEFT_CHECK(bytes >= 0, "negative copy of ", bytes, " bytes");
    if (bytes == 0) return;
    WEFT_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
  }
  void synchronize() override { WEFT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // ---- ops
  // ---------------------------------------------------------------------------------------
  void convert(BF16* out, const float* in, int64_t n) { cuda::convert(out, in, n, stream_); }
  void embedding_forward(BF16* out, const int32_t* tokens, const BF16* wte, const BF16* wpe, int B,
                         int T, int C) {
    cuda::embedding_forward(out, tokens, wte, wpe, B, T, C, stream_);
  }
  void embedding_backward(float* dwte, float* dwpe, const BF16* dout, const int32_t* tokens_host,
                          int B, int T, int C) {
    cuda::embedding_backward(*ctx_, dwte, dwpe, dout, tokens_host, B, T, C);
  }
  void embedding_forward_shard(BF16* out, const int32_t* tokens, const BF16* wte, const BF16* wpe,
                               int B, int T, int C, int v0, int Vl) {
    cuda::embedding_forward_shard(out, tokens, wte, wpe, B, T, C, v0, Vl, stream_);
  }
  void embedding_backward_shard(float* dwte, float* dwpe, const BF16* dout,
                                const int32_t* tokens_host, int B, int T, int C, int v0, int Vl) {
    cuda::embedding_backward_shard(*ctx_, dwte, dwpe, dout, tokens_host, B, T, C, v0, Vl);
  }
  void residual_forward(BF16* out, const BF16* a, const BF16* b, int64_t n) {
    cuda::residual_forward(out, a, b, n, stream_);
  }
  void layernorm_forward(BF16* out, float* mean, float* rstd, const BF16* inp, const BF16* weight,
                         const BF16* bias, int N, int C, Norm norm) {
    cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, norm, stream_);
  }
  void fused_residual_layernorm_forward(BF16* residual, BF16* out, float* mean, float* rstd,
                                        const BF16* a, const BF16* b, const BF16* weight,
                                        const BF16* bias, int N, int C, Norm norm) {
    cuda::fused_residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C,
                                           norm, stream_);
  }
  void layernorm_backward(BF16* dinp, float* dweight, float* dbias, const BF16* dout,
                          const BF16* inp, const BF16* weight, const float* mean, const float* rstd,
                          int N, int C, Norm norm) {
    cuda::layernorm_backward(*ctx_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                             norm);
  }
  void linear_forward(BF16* out, BF16* pre_gelu, const BF16* inp, const BF16* weight,
                      const BF16* bias, int N, int IC, int OC) {
    cuda::linear_forward(*ctx_, out, pre_gelu, inp, weight, bias, N, IC, OC);
  }
  void linear_backward(BF16* dinp, float* dweight, float* dbias, const BF16* dout, const BF16* inp,
                       const BF16* weight, const BF16* gelu_pre, int N, int IC, int OC) {
    cuda::linear_backward(*ctx_, dinp, dweight, dbias, dout, inp, weight, gelu_pre, N, IC, OC);
  }
  void swiglu_forward(BF16* out, const BF16* inp, int N, int F) {
    cuda::swiglu_forward(out, inp, N, F, stream_);
  }
  void swiglu_backward(BF16* dinp, const BF16* dout, const BF16* inp, int N, int F) {
    cuda::swiglu_backward(dinp, dout, inp, N, F, stream_);
  }
  void rope(BF16* qkv, int B, int T, int NH, int NKV, int HS, float theta, bool inverse) {
    cuda::rope(qkv, B, T, NH, NKV, HS, theta, inverse, stream_);
  }
  void attention_forward(BF16* out, float* lse, const BF16* qkv, int B, int T, int C, int NH,
                         int NKV) {
    cuda::flash_attention_forward(out, lse, qkv, B, T, C, NH, NKV, stream_);
  }
  void attention_backward(BF16* dqkv, const BF16* dout, const BF16* qkv, const BF16* out,
                          const float* lse, int B, int T, int C, int NH, int NKV) {
    cuda::flash_attention_backward(*ctx_, dqkv, dout, qkv, out, lse, B, T, C, NH, NKV);
  }
  // FlashAttention-2 keeps lse[B,NH,T].
  int64_t attention_saved_floats(int B, int T, int NH) const override {
    return int64_t{B} * NH * T;
  }
  bool attention_supports(int C, int NH) const override {
    return cuda::flash_attention_supports(C, NH);
  }
  void softmax_cross_entropy(float* losses, BF16* logits, const int32_t* targets, float dloss,
                             int N, int V, int Vp) {
    cuda::softmax_cross_entropy_fused(losses, logits, targets, dloss, N, V, Vp, stream_);
  }
  void cross_entropy_shard_stats(float* stats, const BF16* logits, const int32_t* targets, int N,
                                 int Vl, int Vv, int v0) {
    cuda::cross_entropy_shard_stats(stats, logits, targets, N, Vl, Vv, v0, stream_);
  }
  void cross_entropy_shard_finish(float* losses, BF16* logits, const float* all_stats, int tp,
                                  const int32_t* targets, float dloss, int N, int V, int Vl, int Vv,
                                  int v0) {
    cuda::cross_entropy_shard_finish(losses, logits, all_stats, tp, targets, dloss, N, V, Vl, Vv,
                                     v0, stream_);
  }
  double sum_squares(const float* x, int64_t n) override {
    cuda::sum_squares(*ctx_, sum_, x, n);
    double host = 0.0;
    download(&host, sum_, sizeof(double));
    return host;
  }
  void add_mean(double* sum, const float* x, int64_t n, int64_t count) override {
    cuda::add_mean(sum, x, n, count, stream_);
  }
  void accumulate(float* dst, const float* src, int64_t n) override {
    cuda::residual_forward(dst, dst, src, n, stream_);  // element-wise: out may alias a
  }

  // ---- AdamW -----------------------------------------------------------------------------------
  using Backend::plan_adamw;
  std::unique_ptr<AdamW> plan_adamw(std::span<const AdamWSegment> segments,
                                    AdamWCapacity capacity) override {
    std::vector<cuda::AdamWSegment> converted;
    converted.reserve(segments.size());
    for (const AdamWSegment& s : segments) {
      converted.push_back({s.params, s.grads, s.m, s.v, s.params16, s.n, s.weight_decay});
    }
    auto plan = std::make_unique<CudaAdamW>(*arena_, std::span<const cuda::AdamWSegment>(converted),
                                            capacity, stream_);
    // AdamWPlan uploads its tables with cudaMemcpy on the legacy default stream, which this
    // non-blocking stream does not wait for; from pageable memory that copy may return before its
    // DMA is done. Wait for the whole device once, at planning time.
    WEFT_CUDA_CHECK(cudaDeviceSynchronize());
    return plan;
  }

  // ---- measuring -------------------------------------------------------------------------------
  double linear_forward_seconds(int N, int IC, int OC, int reps) override {
    WEFT_CHECK(N > 0 && IC > 0 && OC > 0 && reps > 0, "linear_forward_seconds(N=", N, ", IC=", IC,
               ", OC=", OC, ", reps=", reps, ")");
    const size_t mark = arena_->mark();
    // Give the blocks back however this ends (the arena is a stack: nothing else is allocated
    // while this runs).
    struct Release {
      Arena& arena;
      size_t mark;
      ~Release() { arena.release(mark); }
    } release{*arena_, mark};

    auto* inp = arena_->allocate<BF16>(int64_t{N} * IC);
    auto* weight = arena_->allocate<BF16>(int64_t{OC} * IC);
    auto* out = arena_->allocate<BF16>(int64_t{N} * OC);
    // Random inputs, not zeros: a GEMM on zeros runs faster than on real data (METHOD.md).
    fill_random(inp, int64_t{N} * IC, 1);
    fill_random(weight, int64_t{OC} * IC, 2);

    cuda::linear_forward(*ctx_, out, nullptr, inp, weight, nullptr, N, IC, OC);  // warm-up
    std::vector<EventPair> events(static_cast<size_t>(reps));
    for (EventPair& e : events) {
      WEFT_CUDA_CHECK(cudaEventRecord(e.start, stream_));
      cuda::linear_forward(*ctx_, out, nullptr, inp, weight, nullptr, N, IC, OC);
      WEFT_CUDA_CHECK(cudaEventRecord(e.stop, stream_));
    }
    synchronize();
    std::vector<double> seconds;
    seconds.reserve(events.size());
    for (const EventPair& e : events) {
      float ms = 0.f;
      WEFT_CUDA_CHECK(cudaEventElapsedTime(&ms, e.start, e.stop));
      seconds.push_back(1e-3 * ms);
    }
    return median(std::move(seconds));
  }

 private:
  // x[0, n) = uniform values in [-1, 1): a tile of at most 64 Ki values is drawn on the host,
  // converted on the device, then repeated by doubling copies, so no buffer of n floats is needed
  // (a trainer calls this with its arena nearly full).
  void fill_random(BF16* x, int64_t n, uint64_t seed) {
    const int64_t tile = std::min<int64_t>(n, int64_t{1} << 16);
    std::vector<float> host(static_cast<size_t>(tile));
    const uint64_t key = stream_key(seed, "linear_forward_seconds");
    for (int64_t i = 0; i < tile; ++i) {
      host[static_cast<size_t>(i)] = 2.f * uniform_at(key, static_cast<uint64_t>(i)) - 1.f;
    }
    const size_t mark = arena_->mark();
    auto* staged = arena_->allocate<float>(tile);
    upload(staged, host.data(), tile * static_cast<int64_t>(sizeof(float)));
    cuda::convert(x, staged, tile, stream_);
    for (int64_t have = tile; have < n; have *= 2) {
      const int64_t count = std::min(have, n - have);
      WEFT_CUDA_CHECK(cudaMemcpyAsync(x + have, x, static_cast<size_t>(count) * sizeof(BF16),
                                      cudaMemcpyDeviceToDevice, stream_));
    }
    // The staging block may be handed out again only after the convert has read it.
    synchronize();
    arena_->release(mark);
  }

  void release_all() {
    for (Staging& s : staging_) {
      if (s.done != nullptr) (void)cudaEventDestroy(s.done);
      if (s.data != nullptr) (void)cudaFreeHost(s.data);
      s = {};
    }
    if (side_ != nullptr) {
      (void)cudaStreamSynchronize(side_);
      (void)cudaEventDestroy(queued_);
      (void)cudaEventDestroy(downloaded_);
      (void)cudaStreamDestroy(side_);
      side_ = nullptr;
    }
    ctx_.reset();
    arena_.reset();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Context> ctx_;
  double* sum_ = nullptr;  // device: sum_squares' result
  // upload_async's pinned host blocks, each with the event after its last DMA.
  static constexpr int kStagingBlocks = 8;
  struct Staging {
    void* data = nullptr;
    int64_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  Staging staging_[kStagingBlocks];
  int64_t next_staging_ = 0;
  // download_async's side stream, the event it starts after and the one after its last copy.
  cudaStream_t side_ = nullptr;
  cudaEvent_t queued_ = nullptr, downloaded_ = nullptr;
  bool downloads_pending_ = false;  // a copy the next order_after_downloads() must wait for
  size_t base_ = 0;                 // the arena's top after the backend's own blocks
};

}  // namespace

std::unique_ptr<Backend> make_mixed_backend(int64_t arena_bytes, int device) {
  return std::make_unique<CudaBackend>(arena_bytes, device);
}

}  // namespace weft::kernels::cuda
