// The staged communicator: device buffers through pinned host memory (staged_communicator.h).
// Host code only. The copies are cudaMemcpyAsync / cudaMemcpy2DAsync on the communicator's stream,
// each followed by a stream synchronization: the host reads a staged chunk only after its copy to
// the host is complete, and writes the next chunk only after the previous one left for the device.

#include "weft/comm/cuda/staged_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "weft/core/check.h"
#include "weft/kernels/cuda/arena.h"
#include "weft/kernels/cuda/cuda_check.h"

namespace weft::comm::cuda {
namespace {

using kernels::cuda::PinnedBuffer;
using Stream = kernels::cuda::Stream;

char* bytes_of(void* p) { return static_cast<char*>(p); }
const char* bytes_of(const void* p) { return static_cast<const char*>(p); }

// Pinned buffers for whole point-to-point messages. A buffer is free again once no Work holds it
// (the pool's reference is the only one left); the smallest free one that fits is reused, so a
// pipeline whose messages have a few fixed sizes allocates only during its first step.
class MessagePool {
 public:
  std::shared_ptr<PinnedBuffer> acquire(size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    std::shared_ptr<PinnedBuffer>* best = nullptr;
    for (auto& b : buffers_) {
      if (b.use_count() == 1 && b->size() >= bytes &&
          (best == nullptr || b->size() < (*best)->size()))
        best = &b;
    }
    if (best != nullptr) return *best;
    buffers_.push_back(std::make_shared<PinnedBuffer>(bytes));
    return buffers_.back();
  }

 private:
  std::vector<std::shared_ptr<PinnedBuffer>> buffers_;
};

// What the groups split from one staged communicator share (staged_communicator.h says why it
// is safe to share).
struct Staging {
  Staging(size_t bytes, Stream s) : buffer(bytes), stream(s) {}
  PinnedBuffer buffer;
  MessagePool messages;
  Stream stream;

  // Copies `rows` rows of `width` bytes, `src_pitch` apart at src, to rows `dst_pitch` apart at
  // dst (device -> host or host -> device: `kind`) on the stream, and waits for it.
  void copy(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
            size_t rows, cudaMemcpyKind kind) const {
    if (width == 0 || rows == 0) return;
    if (rows == 1) {
      WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, width, kind, stream));
    } else {
      WEFT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, kind, stream));
    }
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  void to_host(void* host, const void* device, size_t bytes) const {
    copy(host, bytes, device, bytes, bytes, 1, cudaMemcpyDeviceToHost);
  }
  void to_device(void* device, const void* host, size_t bytes) const {
    copy(device, bytes, host, bytes, bytes, 1, cudaMemcpyHostToDevice);
  }
};

// Runs f(offset, count) over [0, n) in pieces of at most `per` elements; once with count 0 when
// n is 0, so an empty collective still meets the peers' empty collective.
template <typename F>
void for_chunks(int64_t n, int64_t per, F&& f) {
  int64_t off = 0;
  do {
    const int64_t k = std::min(per, n - off);
    f(off, k);
    off += k;
  } while (off < n);
}

// A send in flight: the pinned copy of the message stays held until the host send is complete.
struct SendState {
  std::shared_ptr<PinnedBuffer> buffer;
  Work host;  // declared after `buffer`: destroyed first
  // A dropped send: MPI would go on reading the buffer after the pool had reused it, so it is
  // completed here (unless the stack is unwinding from an error: the job is ending then).
  ~SendState() {
    if (host.pending() && std::uncaught_exceptions() == 0) {
      try {
        host.wait();
      } catch (const std::exception&) {
        // Nothing can be reported from a destructor; the peer sees its own timeout.
      }
    }
  }
};

// A receive in flight: wait() completes the host receive, then copies the message to the device.
struct RecvState {
  std::shared_ptr<const Staging> staging;
  std::shared_ptr<PinnedBuffer> buffer;
  void* device = nullptr;
  size_t bytes = 0;
  Work host;  // declared last: a dropped receive is cancelled (by MPI) before its buffer is freed
};

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(std::unique_ptr<Communicator> host, std::shared_ptr<Staging> staging)
      : Communicator(*host), host_(std::move(host)), staging_(std::move(staging)) {}

  Work all_reduce_async(void* data, int64_t n, DataType t, ReduceOp op) override {
    const size_t es = begin("all_reduce", n, t);
    void* host = staging_->buffer.data();
    for_chunks(n, per_chunk("all_reduce", t, 1), [&](int64_t off, int64_t k) {
      staging_->to_host(host, bytes_of(data) + off * es, k * es);
      host_->all_reduce_async(host, k, t, op).wait();
      staging_->to_device(bytes_of(data) + off * es, host, k * es);
    });
    return {};
  }

  // Rows off..off+k of every rank's block of `in` go to the host packed as size() blocks of k;
  // the host reduce-scatter leaves k elements after them, which go to out[off, off+k).
  Work reduce_scatter_async(void* out, const void* in, int64_t n, DataType t) override {
    const size_t es = begin("reduce_scatter", n, t);
    const int64_t p = size();
    char* host = bytes_of(staging_->buffer.data());
    for_chunks(n, per_chunk("reduce_scatter", t, p + 1), [&](int64_t off, int64_t k) {
      char* host_out = host + p * k * es;
      staging_->copy(host, k * es, bytes_of(in) + off * es, n * es, k * es, p,
                     cudaMemcpyDeviceToHost);
      host_->reduce_scatter_async(host_out, host, k, t).wait();
      staging_->to_device(bytes_of(out) + off * es, host_out, k * es);
    });
    return {};
  }

  // The reverse of reduce_scatter's layout: in[off, off+k) to the host, the gathered size()
  // blocks of k back to rows off..off+k of every block of `out`.
  Work all_gather_async(void* out, const void* in, int64_t n, DataType t) override {
    const size_t es = begin("all_gather", n, t);
    const int64_t p = size();
    char* host = bytes_of(staging_->buffer.data());
    for_chunks(n, per_chunk("all_gather", t, p + 1), [&](int64_t off, int64_t k) {
      char* host_out = host + k * es;
      staging_->to_host(host, bytes_of(in) + off * es, k * es);
      host_->all_gather_async(host_out, host, k, t).wait();
      staging_->copy(bytes_of(out) + off * es, n * es, host_out, k * es, k * es, p,
                     cudaMemcpyHostToDevice);
    });
    return {};
  }

  Work broadcast_async(void* data, int64_t n, DataType t, int root) override {
    const size_t es = begin("broadcast", n, t);
    void* host = staging_->buffer.data();
    const bool is_root = root == rank();
    for_chunks(n, per_chunk("broadcast", t, 1), [&](int64_t off, int64_t k) {
      if (is_root) staging_->to_host(host, bytes_of(data) + off * es, k * es);
      host_->broadcast_async(host, k, t, root).wait();
      if (!is_root) staging_->to_device(bytes_of(data) + off * es, host, k * es);
    });
    return {};
  }

  Work send_async(const void* data, int64_t n, DataType t, int peer, int tag) override {
    const size_t es = begin("send", n, t);
    const size_t bytes = static_cast<size_t>(n) * es;
    auto s = std::make_shared<SendState>();
    s->buffer = staging_->messages.acquire(bytes);
    staging_->to_host(s->buffer->data(), data, bytes);
    s->host = host_->send_async(s->buffer->data(), n, t, peer, tag);
    return Work([s] { s->host.wait(); }, [s] { return s->host.test(); });
  }

  Work recv_async(void* data, int64_t n, DataType t, int peer, int tag) override {
    const size_t es = begin("recv", n, t);
    const size_t bytes = static_cast<size_t>(n) * es;
    auto r = std::make_shared<RecvState>();
    r->staging = staging_;
    r->buffer = staging_->messages.acquire(bytes);
    r->device = data;
    r->bytes = bytes;
    r->host = host_->recv_async(r->buffer->data(), n, t, peer, tag);
    return Work(
        [r] {
          r->host.wait();
          r->staging->to_device(r->device, r->buffer->data(), r->bytes);
        },
        // Complete for the caller only once the device copy is done, which wait() does.
        [r] {
          (void)r->host.test();  // progresses the host receive
          return false;
        });
  }

  void barrier() override {
    host_->set_timeout_seconds(timeout_seconds());
    host_->barrier();
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    host_->set_timeout_seconds(timeout_seconds());
    std::unique_ptr<Communicator> sub = host_->split(color, key, name);
    if (sub == nullptr) return nullptr;
    return std::make_unique<StagedCommunicator>(std::move(sub), staging_);
  }

 private:
  // Checks the count and hands the timeout down; returns the element size.
  size_t begin(const char* what, int64_t n, DataType t) {
    if (n < 0) throw Error(fmt::format("{} on group '{}': negative count {}", what, name(), n));
    host_->set_timeout_seconds(timeout_seconds());
    return dtype_size(t);
  }
  // Elements per chunk when the staging buffer holds `parts` pieces of a chunk.
  int64_t per_chunk(const char* what, DataType t, int64_t parts) const {
    const auto per = static_cast<int64_t>(staging_->buffer.size() / dtype_size(t)) / parts;
    if (per < 1) {
      throw Error(fmt::format(
          "{} on group '{}' (rank {} of {}): the staging buffer of {} bytes holds fewer than {} "
          "{} elements (raise staging_bytes)",
          what, name(), rank(), size(), staging_->buffer.size(), parts, dtype_name(t)));
    }
    return per;
  }

  std::unique_ptr<Communicator> host_;
  std::shared_ptr<Staging> staging_;
};

}  // namespace

std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator> host,
                                                       size_t staging_bytes, CUstream_st* stream) {
  WEFT_CHECK(host != nullptr, "make_staged_communicator: no host communicator");
  WEFT_CHECK(staging_bytes > 0, "make_staged_communicator: staging_bytes must be > 0");
  auto staging = std::make_shared<Staging>(staging_bytes, stream);
  return std::make_unique<StagedCommunicator>(std::move(host), std::move(staging));
}

}  // namespace weft::comm::cuda
