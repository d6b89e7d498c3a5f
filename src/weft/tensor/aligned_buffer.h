#pragma once
// One 64-byte aligned, zero-initialized allocation of T (zeroing also makes the pages resident, so
// measured memory matches predicted memory from the first step on).
//
// Pages::Huge (ZeRO's unit pool, tensor/unit_pool.h): an allocation of 2 MiB or more starts on a
// huge-page boundary, is rounded up to whole huge pages and advised as huge (transparent huge
// pages; advice only: where THP is off it changes nothing), then zeroed, so its pages fault in
// huge: fewer TLB misses, and a peer's single-copy read (Open MPI's CMA) pins 512x fewer pages.

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
  static constexpr int64_t kHugePageBytes = int64_t{2} << 20;  // x86-64 transparent huge pages
  enum class Pages { Normal, Huge };

  // What an allocation of `bytes` takes, all of it resident once zeroed: rounded to its alignment
  // (a page from a page on, a huge page from a huge page on under Pages::Huge).
  static int64_t allocated_bytes(int64_t bytes, Pages pages = Pages::Normal) {
    return round_up(bytes, alignment(bytes, pages));
  }

  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t n, Pages pages = Pages::Normal) : size_(n) {
    WEFT_CHECK(n >= 0, "negative buffer size ", n);
    if (n == 0) return;
    const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
    const int64_t align = alignment(bytes, pages), total = round_up(bytes, align);
    data_ =
        static_cast<T*>(std::aligned_alloc(static_cast<size_t>(align), static_cast<size_t>(total)));
    if (data_ == nullptr) throw std::bad_alloc();
    if (align == kHugePageBytes) madvise(data_, static_cast<size_t>(total), MADV_HUGEPAGE);
    std::memset(static_cast<void*>(data_), 0, static_cast<size_t>(total));
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
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
  static int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
  // Page-aligned from a page on (a unit's collectives and the kernels see whole pages).
  static int64_t alignment(int64_t bytes, Pages pages) {
    if (pages == Pages::Huge && bytes >= kHugePageBytes) return kHugePageBytes;
    return bytes >= kPageBytes ? kPageBytes : kAlignBytes;
  }

  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace weft
