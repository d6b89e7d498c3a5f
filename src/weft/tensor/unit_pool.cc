#include "weft/tensor/unit_pool.h"

#include <algorithm>
#include <cstring>

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
  slots_.push_back({AlignedBuffer<float>(n), true});  // zero-initialized
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
