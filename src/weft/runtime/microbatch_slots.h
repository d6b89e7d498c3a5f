#pragma once
// The pipeline runtime's bookkeeping (pipeline_runner.h): which activation slot of its pool each
// (chunk, microbatch) of a step holds.

#include <vector>

#include "weft/core/check.h"

namespace weft::runtime {

// A pool of `slots` activation slots (its chunks' peak of microbatches in flight at once, layout/
// rank.h) shared by `chunks` chunks over the `microbatches` of a step: a (chunk, microbatch) takes
// a free slot at its forward (or at the receive of its input) and gives it back after its last
// backward pass; freed slots are reused last in, first out.
class MicrobatchSlots {
 public:
  MicrobatchSlots() = default;
  MicrobatchSlots(int chunks, int microbatches, int slots, int pool)
      : pool_(pool), m_(microbatches), slots_(slots), slot_of_(chunks * microbatches, -1) {
    for (int k = slots - 1; k >= 0; --k) free_.push_back(k);
  }
  // The slot chunk j's microbatch mb holds (j: its place among the pool's chunks); -1 when none.
  int of(int j, int mb) const { return slot_of_.at(j * m_ + mb); }
  // The slot it holds, taking a free one when it holds none.
  int acquire(int j, int mb) {
    int& slot = slot_of_.at(j * m_ + mb);
    if (slot >= 0) return slot;
    WEFT_CHECK(!free_.empty(), "slot pool ", pool_, " has more microbatches in flight than its ",
               slots_, " slots (its program's peak)");
    slot = free_.back();
    free_.pop_back();
    return slot;
  }
  void release(int j, int mb) {
    int& slot = slot_of_.at(j * m_ + mb);
    WEFT_CHECK(slot >= 0, "slot pool ", pool_, ": chunk ", j, " microbatch ", mb, " holds no slot");
    free_.push_back(slot);
    slot = -1;
  }

 private:
  int pool_ = 0, m_ = 0, slots_ = 0;
  std::vector<int> slot_of_;  // per (chunk, microbatch)
  std::vector<int> free_;
};

}  // namespace weft::runtime
