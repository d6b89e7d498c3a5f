#pragma once
// Device memory of the CUDA backend (docs/cuda.md §Memory). One Arena per process: a single
// cudaMalloc of a configured size at start-up, then bump allocation with alignment, released by
// popping back to a mark or resetting. No managed memory (it can hang a GPU that is asked for more
// than it has), no allocation in a training step. Pinned host buffers (cudaMallocHost) stage
// device data through host memory for a communicator whose transport works on host buffers (MPI).
//
// This header needs no CUDA headers: BumpAllocator (the arithmetic) is unit-tested without a GPU.

#include <cstddef>
#include <cstdint>

#include "weft/core/check.h"

struct CUstream_st;

namespace weft::kernels::cuda {

// A CUDA stream (cudaStream_t, without the CUDA headers); nullptr is the default stream.
using Stream = CUstream_st*;

// Number of CUDA devices this process can use: 0 when there is none or no working driver. Never
// throws, so tests can skip on it.
int device_count();

// Bump allocation on offsets into a region of `capacity` bytes: the arithmetic of Arena, separate
// so it is tested without device memory.
class BumpAllocator {
 public:
  explicit BumpAllocator(size_t capacity) : capacity_(capacity) {}

  // Offset of a new block of `bytes` at a multiple of `alignment` (a power of two). Throws
  // weft::Error, with the sizes, when it does not fit.
  size_t allocate(size_t bytes, size_t alignment) {
    WEFT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment ", alignment,
               " is not a power of two");
    const size_t offset = (top_ + alignment - 1) & ~(alignment - 1);
    WEFT_CHECK(offset <= capacity_ && bytes <= capacity_ - offset,
               "device arena exhausted: ", bytes, " bytes requested, ", capacity_ - top_, " of ",
               capacity_, " free (raise the arena size)");
    top_ = offset + bytes;
    return offset;
  }
  // Everything allocated after mark() is freed by release(mark): stack discipline.
  size_t mark() const { return top_; }
  void release(size_t mark) {
    WEFT_CHECK(mark <= top_, "release(", mark, ") above the arena's top ", top_);
    top_ = mark;
  }
  size_t used() const { return top_; }

 private:
  size_t capacity_;
  size_t top_ = 0;
};

// One cudaMalloc of `bytes` on the current device, handed out by bump allocation.
class Arena {
 public:
  // cudaMalloc returns 256-byte aligned memory; blocks default to that alignment (cuBLASLt picks
  // its fastest kernels for 256-byte aligned matrices) and may ask for less, not more.
  static constexpr size_t kAlignment = 256;

  explicit Arena(size_t bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* allocate(size_t bytes, size_t alignment = kAlignment);
  template <typename T>
  T* allocate(int64_t count, size_t alignment = kAlignment) {
    WEFT_CHECK(count >= 0, "negative element count ", count);
    return static_cast<T*>(allocate(static_cast<size_t>(count) * sizeof(T), alignment));
  }
  size_t mark() const { return bump_.mark(); }
  void release(size_t mark) { bump_.release(mark); }
  size_t used() const { return bump_.used(); }

 private:
  void* base_ = nullptr;
  BumpAllocator bump_;
};

// Page-locked host memory (cudaMallocHost): copies between it and the device are DMA transfers
// that run asynchronously on a stream at full link speed.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// A stream-ordered copy to the device (from pinned memory it is asynchronous; from pageable
// memory it returns once the host data is staged).
void copy_host_to_device_async(void* device, const void* host, size_t bytes, Stream stream);

// Synchronous copies (any host memory), for set-up and tests.
void copy_to_device(void* device, const void* host, size_t bytes);
void copy_to_host(void* host, const void* device, size_t bytes);

}  // namespace weft::kernels::cuda
