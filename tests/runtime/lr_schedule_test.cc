// The learning-rate schedule: linear warmup, cosine decay to min_lr at the last step.

#include "weft/runtime/lr_schedule.h"

#include <gtest/gtest.h>

namespace weft::runtime {
namespace {

TEST(LrSchedule, WarmsUpLinearlyFromTheFirstStep) {
  const LrSchedule s{1.0, 0.1, 4, 20};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(1), 0.5);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
}

TEST(LrSchedule, DecaysAlongACosineToMinLrAtTheLastStep) {
  const LrSchedule s{1.0, 0.1, 4, 20};  // decay over steps 4..19
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_NEAR(s.at(4 + 15 / 2.0), 0.55, 0.05);
  EXPECT_NEAR(s.at(19), 0.1, 1e-12);
  EXPECT_NEAR(s.at(100), 0.1, 1e-12);  // past the end it stays at min_lr
  for (int i = 4; i < 19; ++i) EXPECT_GT(s.at(i), s.at(i + 1)) << i;
  // Halfway through the decay the rate is halfway between lr and min_lr.
  const LrSchedule h{1.0, 0.0, 0, 11};
  EXPECT_NEAR(h.at(5), 0.5, 1e-12);
}

TEST(LrSchedule, HandlesNoWarmupAndRunsTooShortToDecay) {
  EXPECT_DOUBLE_EQ((LrSchedule{2.0, 0.2, 0, 10}).at(0), 2.0);
  EXPECT_DOUBLE_EQ((LrSchedule{2.0, 0.2, 0, 1}).at(0), 2.0);
  EXPECT_DOUBLE_EQ((LrSchedule{2.0, 0.2, 5, 3}).at(2), 2.0 * 3 / 5);
}

}  // namespace
}  // namespace weft::runtime
