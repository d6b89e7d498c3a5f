#pragma once
// The pipeline runtime's bookkeeping (pipeline_stages.h): which of a model chunk's activation
// slots each microbatch of the step holds, and the tag of each message between stages.

#include <vector>

#include "weft/core/check.h"

namespace weft::runtime {

// A chunk's `slots` activation slots (its program's peak of microbatches in flight) over the
// `microbatches` of a step: a microbatch takes a free slot at its forward (or at the receive of
// its input) and gives it back after its backward; freed slots are reused last in, first out.
class MicrobatchSlots {
 public:
  MicrobatchSlots() = default;
  MicrobatchSlots(int microbatches, int slots, int stage)
      : stage_(stage), slots_(slots), slot_of_(microbatches, -1) {
    for (int k = slots - 1; k >= 0; --k) free_.push_back(k);
  }
  // The slot microbatch mb holds; -1 when none.
  int of(int mb) const { return slot_of_.at(mb); }
  // The slot mb holds, taking a free one when it holds none.
  int acquire(int mb) {
    if (slot_of_.at(mb) >= 0) return slot_of_[mb];
    WEFT_CHECK(!free_.empty(), "stage ", stage_, " has more microbatches in flight than ", slots_,
               " (its program's peak)");
    slot_of_[mb] = free_.back();
    free_.pop_back();
    return slot_of_[mb];
  }
  void release(int mb) {
    WEFT_CHECK(slot_of_.at(mb) >= 0, "stage ", stage_, " microbatch ", mb, " holds no slot");
    free_.push_back(slot_of_[mb]);
    slot_of_[mb] = -1;
  }

 private:
  int stage_ = 0, slots_ = 0;
  std::vector<int> slot_of_;  // per microbatch
  std::vector<int> free_;
};

// The tag of the message carrying stage `stage`'s input activation (or, grad, the gradient of
// its output) for microbatch mb of a step of m: one tag per (stage, microbatch, direction).
inline int stage_message_tag(int stage, int mb, int m, bool grad) {
  return (stage * m + mb) * 2 + (grad ? 1 : 0);
}

}  // namespace weft::runtime
