#pragma once
// One 64-byte aligned, zero-initialized allocation of T (zeroing also makes the pages resident, so
// measured memory matches predicted memory from the first step on).
//
// A Lazy buffer is mapped but not touched: its pages become resident when first written and
// discard() returns whole pages to the OS again (they read as zero). ZeRO-2/3 keep gradients and
// parameters this way: only the layers in use occupy memory, at unchanged offsets
// (runtime/distributed_optimizer.h).

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include <sys/mman.h>

#include "weft/core/check.h"

namespace weft {

template <typename T>
class AlignedBuffer {
 public:
  static constexpr int64_t kAlignBytes = 64;

  static constexpr int64_t kPageBytes = 4096;
  enum class Residency { Eager, Lazy };

  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t n, Residency residency = Residency::Eager) : size_(n) {
    WEFT_CHECK(n >= 0, "negative buffer size ", n);
    if (n == 0) return;
    if (residency == Residency::Lazy) {
      mapped_bytes_ = round_up(n * static_cast<int64_t>(sizeof(T)), kPageBytes);
      void* p = mmap(nullptr, static_cast<size_t>(mapped_bytes_), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      data_ = static_cast<T*>(p);
      return;
    }
    // Page-aligned from a page on, so discard() can return whole pages of any buffer.
    const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
    const int64_t align = bytes >= kPageBytes ? kPageBytes : kAlignBytes;
    data_ = static_cast<T*>(std::aligned_alloc(static_cast<size_t>(align),
                                               static_cast<size_t>(round_up(bytes, align))));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, static_cast<size_t>(round_up(bytes, align)));
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        mapped_bytes_(std::exchange(o.mapped_bytes_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(mapped_bytes_, o.mapped_bytes_);
    return *this;
  }
  ~AlignedBuffer() {
    if (mapped_bytes_ > 0) {
      munmap(data_, static_cast<size_t>(mapped_bytes_));
    } else {
      std::free(data_);
    }
  }

  // Zeroes elements [begin, begin + n) and hands the whole pages among them back to the OS
  // (madvise MADV_DONTNEED: private anonymous pages read as zero afterwards), so a discarded range
  // stops counting as resident memory until it is written again.
  void discard(int64_t begin, int64_t n) {
    WEFT_CHECK(begin >= 0 && n >= 0 && begin + n <= size_, "discard [", begin, ", ", begin + n,
               ") outside a buffer of ", size_);
    if (n == 0) return;
    char* const base = reinterpret_cast<char*>(data_);
    const int64_t b = begin * static_cast<int64_t>(sizeof(T));
    const int64_t e = (begin + n) * static_cast<int64_t>(sizeof(T));
    const int64_t pb = round_up(b, kPageBytes), pe = e / kPageBytes * kPageBytes;
    if (pb >= pe) {
      std::memset(base + b, 0, static_cast<size_t>(e - b));
      return;
    }
    std::memset(base + b, 0, static_cast<size_t>(pb - b));
    std::memset(base + pe, 0, static_cast<size_t>(e - pe));
    WEFT_CHECK(madvise(base + pb, static_cast<size_t>(pe - pb), MADV_DONTNEED) == 0,
               "madvise(MADV_DONTNEED) failed");
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }
  int64_t bytes() const { return size_ * static_cast<int64_t>(sizeof(T)); }
  T& operator[](int64_t i) { return data_[i]; }
  const T& operator[](int64_t i) const { return data_[i]; }
  // Lazy buffers give their pages back; others stay resident.
  void zero() {
    if (mapped_bytes_ > 0) {
      discard(0, size_);
    } else if (size_ > 0) {
      std::memset(static_cast<void*>(data_), 0, static_cast<size_t>(bytes()));
    }
  }
  bool lazy() const { return mapped_bytes_ > 0; }

 private:
  static int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

  T* data_ = nullptr;
  int64_t size_ = 0;
  int64_t mapped_bytes_ = 0;  // > 0: a Lazy mapping of this many bytes
};

}  // namespace weft
