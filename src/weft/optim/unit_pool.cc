#include "weft/optim/unit_pool.h"

#include <iterator>

#include "weft/core/check.h"

namespace weft::optim {

void* UnitPool::acquire(int64_t bytes, bool zeroed) {
  WEFT_CHECK(bytes > 0, "a unit buffer of ", bytes, " bytes");
  for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
    Slot& s = slots_[*it];
    if (s.bytes != bytes) continue;
    free_.erase(std::next(it).base());
    s.in_use = true;
    if (zeroed) backend_.zero(s.p, bytes);
    return s.p;
  }
  Slot s{backend_.allocate(bytes), bytes, true};
  if (zeroed) backend_.zero(s.p, bytes);
  slots_.push_back(s);
  return s.p;
}

void UnitPool::release(void* p) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].p != p) continue;
    WEFT_CHECK(slots_[i].in_use, "a unit buffer released twice");
    slots_[i].in_use = false;
    free_.push_back(i);
    return;
  }
  WEFT_FAIL("release of a buffer that is not the pool's");
}

std::vector<int64_t> UnitPool::sizes() const {
  std::vector<int64_t> out;
  for (const Slot& s : slots_) out.push_back(s.bytes);
  return out;
}

}  // namespace weft::optim
