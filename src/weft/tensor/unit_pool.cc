#include "weft/tensor/unit_pool.h"

#include <cstring>
#include <iterator>

#include "weft/core/check.h"

namespace weft {

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
  slots_.push_back({AlignedBuffer<float>(n, AlignedBuffer<float>::Pages::Huge), true});
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

}  // namespace weft
