#include "weft/tensor/unit_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "weft/core/check.h"

namespace weft {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;  // x86-64 transparent huge pages
}

// Buffers of a huge page or more start on a huge-page boundary and are advised as huge
// (transparent huge pages): fewer TLB misses for the GEMMs that write gradients into them, and
// the peer's single-copy read (Open MPI's CMA, process_vm_readv) pins 512x fewer pages. Advice
// only: where THP is off it changes nothing. Zeroed after the advice, so the pages fault in huge.
UnitPool::HugeBuffer::HugeBuffer(int64_t n) : n_(n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t size = (bytes + align - 1) / align * align;
  data_ = static_cast<float*>(std::aligned_alloc(align, size));
  if (data_ == nullptr) throw std::bad_alloc();
  if (align == kHugePage) madvise(data_, size, MADV_HUGEPAGE);
  std::memset(data_, 0, size);
}

float* UnitPool::acquire(int64_t n, bool zeroed) {
  WEFT_CHECK(n > 0, "a unit buffer of ", n, " elements");
  for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
    Slot& s = slots_[*it];
    if (s.buf.size() != n) continue;
    free_.erase(std::next(it).base());
    s.in_use = true;
    if (zeroed) std::memset(s.buf.data(), 0, static_cast<size_t>(n) * sizeof(float));
    return s.buf.data();
  }
  slots_.push_back({HugeBuffer(n), true});
  return slots_.back().buf.data();
}

void UnitPool::release(float* p) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].buf.data() != p) continue;
    WEFT_CHECK(slots_[i].in_use, "a unit buffer released twice");
    slots_[i].in_use = false;
    free_.push_back(i);
    return;
  }
  WEFT_CHECK(false, "release of a buffer that is not the pool's");
}

int64_t UnitPool::held() const {
  int64_t n = 0;
  for (const Slot& s : slots_) n += s.buf.size();
  return n;
}

int UnitPool::in_use() const {
  return static_cast<int>(
      std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.in_use; }));
}

}  // namespace weft
