#include "weft/schedule/simulate.h"

#include <gtest/gtest.h>

#include <string>

#include "weft/schedule/schedule.h"
#include "weft/schedule/text.h"

namespace weft::schedule {
namespace {

Schedule make(Kind kind, const Shape& shape) {
  return make_schedule(kind, shape).value_or_throw("make_schedule");
}

TEST(Simulate, TimesEachInstructionFromItsInputs) {
  const Shape shape{.pp = 2, .microbatches = 2};
  const Schedule s = add_communication(make(Kind::OneFOneB, shape));
  const Timeline t = simulate(s, uniform_costs(shape, {.forward = 1, .backward = 2}, 0.5));
  ASSERT_FALSE(t.deadlocked());
  // Rank 1: RA0 waits for 0F0 (ends 1) + 0.5; F0 [1.5, 2.5); B0 [2.5, 4.5); SG0 at 4.5.
  ASSERT_EQ(t.ranks[1].size(), 8u);
  EXPECT_EQ(t.ranks[1][0].instr.op, Op::RecvAct);
  EXPECT_DOUBLE_EQ(t.ranks[1][0].start, 0);
  EXPECT_DOUBLE_EQ(t.ranks[1][0].end, 1.5);
  EXPECT_DOUBLE_EQ(t.ranks[1][1].start, 1.5);
  EXPECT_DOUBLE_EQ(t.ranks[1][2].end, 4.5);
  EXPECT_DOUBLE_EQ(t.ranks[1][3].start, 4.5);  // the send takes no time
  EXPECT_DOUBLE_EQ(t.ranks[1][3].end, 4.5);
  // Rank 0: F0 [0,1), F1 [1,2), RG0 until 4.5 + 0.5, B0 [5, 7), B1 after rank 1's B1 + 0.5.
  EXPECT_DOUBLE_EQ(t.ranks[0][4].end, 5);
  EXPECT_DOUBLE_EQ(t.ranks[0][5].start, 5);
  // 1B1: rank 1's F1 needs 0F1 (ends 2) + 0.5 but the rank is busy until 4.5: [4.5, 5.5),
  // 1B1 [5.5, 7.5); 0B1 starts at max(7, 8) = 8 and ends at 10.
  EXPECT_DOUBLE_EQ(t.makespan, 10);
  EXPECT_DOUBLE_EQ(t.busy[0], 6);
  EXPECT_DOUBLE_EQ(t.idle[0], 4);
  EXPECT_DOUBLE_EQ(t.idle[1], 10 - 6);
  EXPECT_DOUBLE_EQ(t.bubble_fraction, 8.0 / 12.0);
}

TEST(Simulate, EachMessageHopAddsP2pTimeToGpipe) {
  for (int pp = 1; pp <= 6; ++pp) {
    const Shape shape{.pp = pp, .microbatches = 5};
    const Timeline t = simulate(add_communication(make(Kind::GPipe, shape)),
                                uniform_costs(shape, {.forward = 1, .backward = 2}, 0.25));
    // (m+p-1)(tf+tb) plus p-1 hops forward and p-1 back on the critical path.
    EXPECT_DOUBLE_EQ(t.makespan, (5 + pp - 1) * 3.0 + 2 * (pp - 1) * 0.25) << "pp=" << pp;
  }
}

TEST(Simulate, ChargesTheStepsEndOnTheStream) {
  const Shape shape{.pp = 4, .microbatches = 8};
  const Schedule plain = make(Kind::OneFOneB, shape);
  Costs costs = uniform_costs(shape, {.forward = 1, .backward = 2});
  costs.reduce_grads = 0.5;
  costs.optimizer_step = 0.25;
  const Timeline a = simulate(plain, costs);
  const Timeline b = simulate(add_optimizer_step(plain), costs);
  EXPECT_DOUBLE_EQ(b.makespan, a.makespan + 0.75);  // rank 0 ends last, then reduces and steps
  EXPECT_DOUBLE_EQ(b.busy[2], a.busy[2] + 0.75);
}

TEST(Simulate, UnitCostsMakeEveryComputeOneSlot) {
  const Shape shape{.pp = 3, .microbatches = 4};
  const Timeline t = simulate(make(Kind::ZeroBubbleH1, shape), unit_costs(shape));
  for (const auto& rank : t.ranks) {
    for (const Slot& slot : rank) EXPECT_DOUBLE_EQ(slot.end - slot.start, 1);
  }
  EXPECT_DOUBLE_EQ(t.makespan, 3 * 4 + 2);
}

TEST(Simulate, StopsAtADeadlockAndSaysWhatEachRankWaitsFor) {
  Schedule s{.kind = Kind::OneFOneB, .shape = {.pp = 2, .microbatches = 2}, .programs = {}};
  s.programs = {parse_program("0F0,0B0,0F1,0B1").value(), parse_program("1F1,1F0,1B0,1B1").value()};
  const Timeline t = simulate(s, unit_costs(s.shape));
  ASSERT_TRUE(t.deadlocked());
  ASSERT_EQ(t.blocked.size(), 2u);
  EXPECT_EQ(t.blocked[0].rank, 0);
  EXPECT_EQ(t.blocked[0].index, 1);
  EXPECT_EQ(t.blocked[0].waiting_for,
            "needs 1B0 or 1I0 from rank 1, which never gets there (blocked at #0 1F1)");
  EXPECT_EQ(t.blocked[1].waiting_for,
            "needs 0F1 from rank 0, which never gets there (blocked at #1 0B0)");
  EXPECT_EQ(t.ranks[0].size(), 1u);  // 0F0 ran
  EXPECT_TRUE(t.ranks[1].empty());
}

TEST(Simulate, RejectsCostsForTheWrongNumberOfStages) {
  const Shape shape{.pp = 2, .microbatches = 2};
  EXPECT_THROW(simulate(make(Kind::OneFOneB, shape), unit_costs({.pp = 3, .microbatches = 2})),
               Error);
}

}  // namespace
}  // namespace weft::schedule
