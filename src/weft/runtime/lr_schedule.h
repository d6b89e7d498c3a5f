#pragma once
// The learning rate of a step: linear warmup to lr over warmup_steps, then a cosine decay to min_lr
// at the last step (as GPT-2/3 reproductions do, e.g. nanoGPT). A pure function of the step, so a
// resumed run needs no schedule state beyond the step count.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace weft::runtime {

struct LrSchedule {
  double lr = 0;      // peak, reached at the end of warmup
  double min_lr = 0;  // reached at the last step
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;

  // The rate for step `step` (0-based: the first update is step 0).
  double at(int64_t step) const {
    if (step < warmup_steps) {
      // (step + 1) so that step 0 already moves the weights.
      return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
    }
    const int64_t decay_steps = total_steps - 1 - warmup_steps;
    if (decay_steps <= 0) return lr;  // all warmup: nothing left to decay over
    const double progress = std::clamp(
        static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
  }
};

}  // namespace weft::runtime
