// add_communication() and add_optimizer_step().

#include <gtest/gtest.h>

#include <string>

#include "weft/schedule/schedule.h"
#include "weft/schedule/simulate.h"
#include "weft/schedule/text.h"

namespace weft::schedule {
namespace {

Schedule make(Kind kind, const Shape& shape) {
  return make_schedule(kind, shape).value_or_throw("make_schedule");
}

TEST(Lower, PutsReceivesRightBeforeAndSendsRightAfterTheCompute) {
  const Schedule s = add_communication(make(Kind::OneFOneB, {.pp = 2, .microbatches = 2}));
  EXPECT_EQ(program_to_text(s.programs[0]), "0F0,0SA0>1,0F1,0SA1>1,0RG0<1,0B0,0RG1<1,0B1");
  EXPECT_EQ(program_to_text(s.programs[1]), "1RA0<0,1F0,1B0,1SG0>0,1RA1<0,1F1,1B1,1SG1>0");
}

TEST(Lower, InterleavedMessagesWrapFromTheLastRankToTheFirst) {
  const Schedule s =
      add_communication(make(Kind::Interleaved, {.pp = 2, .vp = 2, .microbatches = 2}));
  // Stage 1 (rank 1) feeds stage 2 (rank 0, chunk b).
  const std::string rank0 = program_to_text(s.programs[0]);
  const std::string rank1 = program_to_text(s.programs[1]);
  EXPECT_NE(rank1.find("1F0,1SA0>0"), std::string::npos) << rank1;
  EXPECT_NE(rank0.find("2RA0<1,2F0,2SA0>1"), std::string::npos) << rank0;
  EXPECT_NE(rank0.find("0RG0<1,0B0"), std::string::npos) << rank0;
  EXPECT_TRUE(validate(s).ok()) << validate(s).message();
}

TEST(Lower, OneRankNeedsNoMessages) {
  const Schedule plain = make(Kind::Interleaved, {.pp = 1, .vp = 4, .microbatches = 3});
  EXPECT_EQ(add_communication(plain), plain);
}

TEST(Lower, AddsOneSendAndOneReceivePerCrossRankEdge) {
  for (Kind kind : all_kinds()) {
    const Shape shape{.pp = 4, .vp = kind == Kind::Interleaved ? 2 : 1, .microbatches = 8};
    const Schedule s = add_communication(make(kind, shape));
    int sends = 0, recvs = 0;
    for (const Program& p : s.programs) {
      for (const Instr& in : p) {
        sends += is_send(in.op);
        recvs += is_recv(in.op);
      }
    }
    const int edges = (shape.num_stages() - 1) * shape.microbatches;
    EXPECT_EQ(sends, 2 * edges) << kind_name(kind);  // activations forward, gradients back
    EXPECT_EQ(recvs, 2 * edges) << kind_name(kind);
  }
}

TEST(Lower, ChangesNoComputeTimeUnderAnyMessageCost) {
  // The simulator charges a cross-rank input p2p whether or not the message is explicit, so
  // the lowered schedule must run every compute at exactly the same time.
  for (Kind kind : all_kinds()) {
    const Shape shape{.pp = 4, .vp = kind == Kind::Interleaved ? 2 : 1, .microbatches = 8};
    const Schedule plain = make(kind, shape);
    const Schedule lowered = add_communication(plain);
    const Costs costs = uniform_costs(shape, {.forward = 1, .backward = 2.5}, 0.3);
    const Timeline a = simulate(plain, costs), b = simulate(lowered, costs);
    ASSERT_FALSE(a.deadlocked());
    ASSERT_FALSE(b.deadlocked());
    EXPECT_DOUBLE_EQ(a.makespan, b.makespan) << kind_name(kind);
    for (int rank = 0; rank < shape.pp; ++rank) {
      std::vector<Slot> compute;
      for (const Slot& slot : b.ranks[rank]) {
        if (is_compute(slot.instr.op)) compute.push_back(slot);
      }
      ASSERT_EQ(compute.size(), a.ranks[rank].size());
      for (std::size_t i = 0; i < compute.size(); ++i) {
        EXPECT_EQ(compute[i].instr, a.ranks[rank][i].instr);
        EXPECT_DOUBLE_EQ(compute[i].start, a.ranks[rank][i].start)
            << kind_name(kind) << " rank " << rank << " " << instr_to_text(compute[i].instr);
      }
    }
  }
}

TEST(Lower, RefusesAScheduleThatAlreadyHasMessages) {
  const Schedule s = add_communication(make(Kind::OneFOneB, {.pp = 2, .microbatches = 2}));
  EXPECT_THROW(add_communication(s), Error);
}

TEST(OptimizerStep, ReducesEachStageAfterItsLastGradientAndStepsLast) {
  const Schedule s = add_optimizer_step(
      add_communication(make(Kind::Interleaved, {.pp = 2, .vp = 2, .microbatches = 2})));
  ASSERT_TRUE(validate(s).ok()) << validate(s).message();
  // Rank 1 finishes chunk b (stage 3) first, then chunk a (stage 1) and its last gradient send.
  const std::string rank1 = program_to_text(s.programs[1]);
  EXPECT_NE(rank1.find("3B1,3SG1>0,3R,"), std::string::npos) << rank1;
  EXPECT_TRUE(rank1.ends_with("1B1,1SG1>0,1R,O")) << rank1;
  const std::string rank0 = program_to_text(s.programs[0]);
  EXPECT_TRUE(rank0.ends_with("0RG1<1,0B1,0R,O")) << rank0;
}

TEST(OptimizerStep, ZbH1ReducesAfterTheLastWeightGradient) {
  const Schedule s = add_optimizer_step(make(Kind::ZeroBubbleH1, {.pp = 2, .microbatches = 3}));
  ASSERT_TRUE(validate(s).ok()) << validate(s).message();
  EXPECT_TRUE(program_to_text(s.programs[1]).ends_with("1W2,1R,O"))
      << program_to_text(s.programs[1]);
  EXPECT_THROW(add_optimizer_step(s), Error);
}

}  // namespace
}  // namespace weft::schedule
