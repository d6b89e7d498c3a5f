#include "weft/schedule/send_buffers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weft/schedule/schedule.h"
#include "weft/schedule/simulate.h"
#include "weft/schedule/text.h"

namespace weft::schedule {
namespace {

Schedule lowered(Kind kind, const Shape& shape) {
  return add_optimizer_step(
      add_communication(make_schedule(kind, shape).value_or_throw("make_schedule")));
}

std::string str(const std::vector<SendBuffers>& b) {
  std::string s;
  for (const SendBuffers& r : b) {
    s += std::to_string(r.activations) + "/" + std::to_string(r.gradients) + " ";
  }
  return s;
}

Costs one_to_two(const Shape& shape) {
  return uniform_costs(
      shape, {.forward = 1, .backward = 2, .backward_input = 1, .backward_weight = 1}, 0.25);
}

// docs/schedules.md §4's table (pp 4, activations/gradients per rank), and the same at 8x the
// microbatches: the buffers follow what is in flight, not m.
TEST(SendBuffers, AreAFewPerRankWhateverTheMicrobatches) {
  const struct {
    Kind kind;
    int vp;
    const char* expected;
  } cases[] = {{Kind::GPipe, 1, "2/0 2/2 2/2 0/2 "},
               {Kind::OneFOneB, 1, "2/0 2/1 2/1 0/1 "},
               {Kind::Interleaved, 2, "2/2 2/2 2/2 2/2 "},
               {Kind::ZeroBubbleH1, 1, "2/0 2/1 2/1 0/1 "}};
  for (const auto& c : cases) {
    for (const int m : {8, 64}) {
      const Schedule s = lowered(c.kind, {.pp = 4, .vp = c.vp, .microbatches = m});
      EXPECT_EQ(str(send_buffers(s)), c.expected) << kind_name(c.kind) << " m=" << m;
    }
  }
}

// Under the counts every schedule of a sweep runs to its end in the unbounded run's time (under
// both cost models send_buffers uses), and the compute-only schedule gets the lowered one's.
TEST(SendBuffers, NeitherDeadlockNorSlowTheSchedule) {
  for (const Kind kind : all_kinds()) {
    for (const int pp : {1, 2, 3, 4, 8}) {
      for (const int vp : {1, 2, 3}) {
        if ((vp > 1) != (kind == Kind::Interleaved)) continue;
        for (const int m : {pp, 2 * pp, 4 * pp}) {
          const Shape shape{.pp = pp, .vp = vp, .microbatches = m};
          if (!check_shape(kind, shape).ok()) continue;
          const Schedule s = lowered(kind, shape);
          const std::vector<SendBuffers> b = send_buffers(s);
          const std::string what = std::string(kind_name(kind)) + " pp=" + std::to_string(pp) +
                                   " vp=" + std::to_string(vp) + " m=" + std::to_string(m);
          EXPECT_EQ(b, send_buffers(make_schedule(kind, shape).value())) << what;
          for (const Costs& costs : {unit_costs(shape), one_to_two(shape)}) {
            const Timeline bounded = simulate(s, costs, b);
            EXPECT_FALSE(bounded.deadlocked()) << what;
            EXPECT_DOUBLE_EQ(bounded.makespan, simulate(s, costs).makespan) << what;
          }
          for (int r = 0; r < pp; ++r) {
            EXPECT_LE(b[r].activations, 2) << what << " rank " << r;
            EXPECT_LE(b[r].gradients, 2) << what << " rank " << r;
          }
        }
      }
    }
  }
}

// Interleaved pp 8: rank 0 produces its last chunk's input gradients faster than rank 7 takes
// them (in bursts of p microbatches); with no wait at all it would need 4 buffers, and 1 keeps
// the step: some of its producers then start later than unbounded, none of them on the critical
// path.
TEST(SendBuffers, LetAProducerWaitWhereTheStepDoesNotNotice) {
  const Shape shape{.pp = 8, .vp = 2, .microbatches = 16};
  const Schedule s = lowered(Kind::Interleaved, shape);
  const std::vector<SendBuffers> b = send_buffers(s);
  EXPECT_EQ(b[0].gradients, 1);
  const Costs costs = one_to_two(shape);
  const Timeline free = simulate(s, costs), bounded = simulate(s, costs, b);
  EXPECT_DOUBLE_EQ(bounded.makespan, free.makespan);
  int later = 0;
  for (size_t i = 0; i < free.ranks[0].size(); ++i) {
    later += bounded.ranks[0][i].start > free.ranks[0][i].start;
  }
  EXPECT_GT(later, 0);
}

// A program whose stage 0 produces two outputs before stage 1 (on the same rank) takes the first:
// one buffer would make F(0, 1) wait for F(1, 0), later in its own program. The simulation says
// so, and send_buffers gives two.
TEST(SendBuffers, AreNeverFewerThanTheProgramsNeed) {
  const Schedule s = parse_text(
                         "kind=interleaved pp=1 vp=2 microbatches=2\n"
                         "0F0,0F1,1F0,1B0,0B0,1F1,1B1,0B1\n")
                         .value_or_throw("parse");
  const std::vector<SendBuffers> one = {{.activations = 1, .gradients = 1}};
  const Timeline t = simulate(s, unit_costs(s.shape), one);
  ASSERT_TRUE(t.deadlocked());
  EXPECT_NE(t.blocked[0].waiting_for.find("1F0"), std::string::npos) << t.blocked[0].waiting_for;
  EXPECT_EQ(send_buffers(s), (std::vector<SendBuffers>{{.activations = 2, .gradients = 1}}));
}

TEST(SendBuffers, ARankThatProducesNeedsOne) {
  const Schedule s = lowered(Kind::OneFOneB, {.pp = 2, .microbatches = 2});
  EXPECT_THROW(simulate(s, unit_costs(s.shape), std::vector<SendBuffers>(2)), Error);
}

}  // namespace
}  // namespace weft::schedule
