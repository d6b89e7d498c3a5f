// validate(): each invariant, broken on purpose, is reported in words that name the
// instructions involved.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weft/schedule/schedule.h"
#include "weft/schedule/text.h"

namespace weft::schedule {
namespace {

Schedule from_rows(Shape shape, const std::vector<std::string>& rows) {
  Schedule s{.kind = Kind::OneFOneB, .shape = shape, .programs = {}};
  for (const auto& row : rows) s.programs.push_back(parse_program(row).value_or_throw());
  return s;
}

// The problems as one string, for readable failures; and "contains" on it.
::testing::AssertionResult reports(const Status& status, const std::string& expected) {
  const std::string message = status.message();
  for (const auto& p : status.problems()) {
    if (p == expected) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "expected the problem\n  " << expected << "\namong:\n"
                                       << message;
}

const Shape kTwoByTwo{.pp = 2, .vp = 1, .microbatches = 2};

TEST(Validate, AcceptsAHandWrittenSchedule) {
  EXPECT_TRUE(validate(from_rows(kTwoByTwo, {"0F0,0F1,0B0,0B1", "1F0,1B0,1F1,1B1"})).ok());
}

TEST(Validate, NeedsOneForwardAndOneBackwardPerStageAndMicrobatch) {
  const Status s = validate(from_rows(kTwoByTwo, {"0F0,0F0,0F1,0B0,0B1", "1F0,1B0,1F1"}));
  EXPECT_TRUE(reports(s, "stage 0 microbatch 0: 2 forwards (needs exactly one 0F0)"));
  EXPECT_TRUE(reports(s, "stage 1 microbatch 1: 0 B, 0 I, 0 W (needs one B, or one I and one W)"));
}

TEST(Validate, DoesNotMixFullAndSplitBackwards) {
  const Status s = validate(from_rows(kTwoByTwo, {"0F0,0F1,0B0,0B1", "1F0,1B0,1I0,1F1,1I1,1W1"}));
  EXPECT_TRUE(reports(s, "stage 1 microbatch 0: 1 B, 1 I, 0 W (needs one B, or one I and one W)"));
}

TEST(Validate, PutsEachStageOnItsRank) {
  const Status s = validate(from_rows(kTwoByTwo, {"0F0,0F1,0B0,0B1,1F0", "1B0,1F1,1B1"}));
  EXPECT_TRUE(reports(s, "rank 0 #4 1F0: stage 1 lives on rank 1 (stage % pp), not 0"));
  const Status range = validate(from_rows(kTwoByTwo, {"0F0,0F2,2F0", "1F0"}));
  EXPECT_TRUE(reports(range, "rank 0 #1 forward: microbatch 2 is outside 0..1"));
  EXPECT_TRUE(reports(range, "rank 0 #2 forward: stage 2 is outside 0..1"));
  const Status count = validate(from_rows(kTwoByTwo, {"0F0,0F1,0B0,0B1"}));
  EXPECT_TRUE(reports(count, "1 programs for pp=2 (one per pipeline rank)"));
}

TEST(Validate, RunsABackwardAfterItsForwardAndAWeightGradientAfterItsInputGradient) {
  const Status s = validate(from_rows(kTwoByTwo, {"0F0,0B1,0F1,0B0", "1F0,1W0,1I0,1F1,1I1,1W1"}));
  EXPECT_TRUE(reports(s, "rank 0: 0B1 (#1) runs before 0F1 (#2), which it needs"));
  EXPECT_TRUE(reports(s, "rank 1: 1W0 (#1) runs before 1I0 (#2), which it needs"));
}

TEST(Validate, OrdersNeighbouringStagesThatShareARank) {
  const Shape shape{.pp = 1, .vp = 2, .microbatches = 1};
  const Status s = validate(from_rows(shape, {"1F0,0F0,0B0,1B0"}));
  EXPECT_TRUE(reports(s, "rank 0: 1F0 (#0) runs before 0F0 (#1), which it needs"));
  EXPECT_TRUE(reports(s, "rank 0: 0B0 (#2) runs before 1B0 (#3), which it needs"));
}

TEST(Validate, NeverRunsMoreBackwardsThanForwards) {
  const Status s = validate(from_rows({.pp = 1, .vp = 1, .microbatches = 1}, {"0B0,0F0"}));
  EXPECT_TRUE(reports(s, "rank 0 #0 0B0: more backwards than forwards have run on this rank"));
}

TEST(Validate, MatchesEverySendWithItsReceive) {
  const Status s = validate(from_rows(
      kTwoByTwo, {"0F0,0SA0>1,0F1,0SA1>1,0RG0<1,0B0,0B1", "1RA0<0,1F0,1B0,1SG0>0,1F1,1B1,1SG1>0"}));
  EXPECT_TRUE(reports(s, "0SA1>1 on rank 0 has no matching receive 1RA1<0 on rank 1"));
  EXPECT_TRUE(reports(s, "1SG1>0 on rank 1 has no matching receive 0RG1<1 on rank 0"));
}

TEST(Validate, ChecksPeersAndMessageOrder) {
  const Status peer = validate(from_rows(
      {.pp = 3, .vp = 1, .microbatches = 1},
      {"0F0,0SA0>2,0RG0<1,0B0", "1RA0<0,1F0,1SA0>2,1RG0<2,1B0,1SG0>0", "2RA0<1,2F0,2B0,2SG0>1"}));
  EXPECT_TRUE(reports(peer, "rank 0 #1 0SA0>2: the peer must be rank 1 (the rank of stage 1)"));
  const Status order =
      validate(from_rows(kTwoByTwo, {"0SA0>1,0F0,0F1,0SA1>1,0RG0<1,0B0,0RG1<1,0B1",
                                     "1F0,1RA0<0,1B0,1SG0>0,1RA1<0,1F1,1B1,1SG1>0"}));
  EXPECT_TRUE(reports(order, "rank 0: 0SA0>1 (#0) runs before 0F0 (#1), the activation it sends"));
  EXPECT_TRUE(reports(order, "rank 1: 1F0 (#0) runs before 1RA0<0 (#1), its input"));
}

TEST(Validate, FindsADeadlockAndNamesTheBlockedInstructions) {
  // Rank 1 wants microbatch 1 first; rank 0 only sends it after 0B0, which needs rank 1's B0.
  const Schedule s =
      add_communication(from_rows(kTwoByTwo, {"0F0,0B0,0F1,0B1", "1F1,1F0,1B0,1B1"}));
  const Status status = validate(s);
  EXPECT_TRUE(
      reports(status, "deadlock: 2 of 2 ranks wait forever (sends eager, receives blocking)"));
  EXPECT_TRUE(reports(status,
                      "rank 0 #2 0RG0<1 blocks: needs 1SG0>0 from rank 1, which never gets there "
                      "(blocked at #0 1RA1<0)"));
  EXPECT_TRUE(reports(status,
                      "rank 1 #0 1RA1<0 blocks: needs 0SA1>1 from rank 0, which never gets there "
                      "(blocked at #2 0RG0<1)"));
}

TEST(Validate, EndsTheStepWithOneReductionPerStageAndOneStep) {
  const Status s = validate(from_rows(kTwoByTwo, {"0F0,0F1,0B0,0R,0B1,O", "1F0,1B0,1F1,1B1,O,1R"}));
  EXPECT_TRUE(reports(s, "rank 0: 0R (#3) runs before 0B1 (#4), whose gradient it reduces"));
  EXPECT_TRUE(reports(s, "rank 1 #4 O: OptimizerStep must be the rank's last instruction"));
  const Status missing =
      validate(from_rows(kTwoByTwo, {"0F0,0F1,0B0,0B1,0R,O", "1F0,1B0,1F1,1B1"}));
  EXPECT_TRUE(
      reports(missing, "stage 1: 0 ReduceGrads (needs one, after its last weight gradient)"));
  EXPECT_TRUE(reports(missing, "rank 1: 0 OptimizerStep (needs one, last)"));
}

TEST(Validate, ListsManyProblemsButNotThousands) {
  Schedule s = make_schedule(Kind::GPipe, {.pp = 4, .microbatches = 64}).value();
  for (Program& p : s.programs) p.resize(p.size() / 2);  // drop every backward
  const Status status = validate(s);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.problems().size(), 61u);
  EXPECT_EQ(status.problems().back(), "... and 196 more problems");
}

}  // namespace
}  // namespace weft::schedule
