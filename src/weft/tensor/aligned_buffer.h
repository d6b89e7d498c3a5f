#pragma once
// One 64-byte aligned, zero-initialized allocation of T (zeroing also makes the pages resident, so
// measured memory matches predicted memory from the first step on).

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "weft/core/check.h"

namespace weft {

template <typename T>
class AlignedBuffer {
 public:
  static constexpr int64_t kAlignBytes = 64;
  static constexpr int64_t kPageBytes = 4096;

  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t n) : size_(n) {
    WEFT_CHECK(n >= 0, "negative buffer size ", n);
    if (n == 0) return;
    const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
    // Page-aligned from a page on (a unit's collectives and the kernels see whole pages).
    const int64_t align = bytes >= kPageBytes ? kPageBytes : kAlignBytes;
    const int64_t total = (bytes + align - 1) / align * align;
    data_ =
        static_cast<T*>(std::aligned_alloc(static_cast<size_t>(align), static_cast<size_t>(total)));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, static_cast<size_t>(total));
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept { *this = std::move(o); }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~AlignedBuffer() { std::free(data_); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }
  int64_t bytes() const { return size_ * static_cast<int64_t>(sizeof(T)); }
  T& operator[](int64_t i) { return data_[i]; }
  const T& operator[](int64_t i) const { return data_[i]; }
  void zero() {
    if (size_ > 0) std::memset(static_cast<void*>(data_), 0, static_cast<size_t>(bytes()));
  }

 private:
  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace weft
