// Device memory: the arena, pinned host buffers and copies (arena.h). Host code only, so it is
// compiled by the C++ compiler, not nvcc.

#include "weft/kernels/cuda/arena.h"

#include <cuda_runtime_api.h>

#include <sstream>
#include <utility>

#include "weft/kernels/cuda/cuda_check.h"

namespace weft::kernels::cuda {

namespace detail {
void cuda_failed(cudaError_t err, const char* call, const char* file, int line) {
  // The runtime keeps a failed call's error as its "last error" too: consume it, or the next
  // WEFT_CUDA_CHECK_LAUNCH() (cudaGetLastError) reports this failure again at an innocent launch
  // (seen on the H200, 2026-12-04: a caught cudaMemcpy error resurfaced at the next embedding
  // launch). A sticky error (a kernel fault) stays: every later call fails with it anyway.
  (void)cudaGetLastError();
  std::ostringstream os;
  os << file << ":" << line << ": CUDA error: " << call << ": " << cudaGetErrorString(err) << " ("
     << cudaGetErrorName(err) << ")";
  throw Error(os.str());
}
}  // namespace detail

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later calls do not report it
    return 0;
  }
  return count;
}

Arena::Arena(size_t bytes) : bump_(bytes) { WEFT_CUDA_CHECK(cudaMalloc(&base_, bytes)); }

Arena::~Arena() {
  // A destructor must not throw; at process exit the runtime may already be gone.
  if (base_ != nullptr) (void)cudaFree(base_);
}

void* Arena::allocate(size_t bytes, size_t alignment) {
  WEFT_CHECK(alignment <= kAlignment, "alignment ", alignment, " above the arena's ", kAlignment);
  return static_cast<char*>(base_) + bump_.allocate(bytes, alignment);
}

PinnedBuffer::PinnedBuffer(size_t bytes) : size_(bytes) {
  WEFT_CUDA_CHECK(cudaMallocHost(&data_, bytes));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void copy_host_to_device_async(void* device, const void* host, size_t bytes, Stream stream) {
  WEFT_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
}

void copy_to_device(void* device, const void* host, size_t bytes) {
  WEFT_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* host, const void* device, size_t bytes) {
  WEFT_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace weft::kernels::cuda
