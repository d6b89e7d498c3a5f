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

// Two of each kind a rank produces (pp 4: activations/gradients per rank), at m and 8m
// microbatches alike: the buffers follow what is in flight, not m.
TEST(SendBuffers, AreTwoOfEachKindARankProducesWhateverTheMicrobatches) {
  const struct {
    Kind kind;
    int vp;
    const char* expected;
  } cases[] = {{Kind::GPipe, 1, "2/0 2/2 2/2 0/2 "},
               {Kind::OneFOneB, 1, "2/0 2/2 2/2 0/2 "},
               {Kind::Interleaved, 2, "2/2 2/2 2/2 2/2 "},
               {Kind::ZeroBubbleH1, 1, "2/0 2/2 2/2 0/2 "}};
  for (const auto& c : cases) {
    for (const int m : {8, 64}) {
      const Schedule s = lowered(c.kind, {.pp = 4, .vp = c.vp, .microbatches = m});
      EXPECT_EQ(str(send_buffers(s)), c.expected) << kind_name(c.kind) << " m=" << m;
    }
  }
}

// Under the counts every schedule of a sweep runs to its end in the unbounded run's time, under
// unit costs and under F:B = 1:2 with messages a quarter of a forward (send_buffers.h), and the
// compute-only schedule gets the lowered one's.
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
            EXPECT_LE(b[r].activations, kDoubleBuffered) << what << " rank " << r;
            EXPECT_LE(b[r].gradients, kDoubleBuffered) << what << " rank " << r;
          }
        }
      }
    }
  }
}

// Interleaved: rank 0 produces its last chunk's input gradients faster than the last rank takes
// them (in bursts of p microbatches), so with two buffers some of its producers start later than
// with unbounded ones (pp 8: 4 buffers would keep every start; pp 64: 32), none of them on the
// critical path.
TEST(SendBuffers, LetAProducerWaitWhereTheStepDoesNotNotice) {
  for (const int pp : {8, 64}) {
    const Shape shape{.pp = pp, .vp = 2, .microbatches = 2 * pp};
    const Schedule s = lowered(Kind::Interleaved, shape);
    const std::vector<SendBuffers> b = send_buffers(s);
    EXPECT_EQ(b[0].gradients, 2) << "pp=" << pp;
    const Costs costs = one_to_two(shape);
    const Timeline free = simulate(s, costs), bounded = simulate(s, costs, b);
    EXPECT_DOUBLE_EQ(bounded.makespan, free.makespan) << "pp=" << pp;
    int later = 0;
    for (size_t i = 0; i < free.ranks[0].size(); ++i) {
      later += bounded.ranks[0][i].start > free.ranks[0][i].start;
    }
    EXPECT_GT(later, 0) << "pp=" << pp;
  }
}

// A program whose stage 0 produces three outputs before stage 1 (on the same rank) takes the
// first: with two buffers F(0, 2) would wait for F(1, 0), later in its own program. The simulation
// says so, and send_buffers gives three.
TEST(SendBuffers, AreMoreWhereTwoWouldDeadlock) {
  const Schedule s = parse_text(
                         "kind=interleaved pp=1 vp=2 microbatches=3\n"
                         "0F0,0F1,0F2,1F0,1B0,0B0,1F1,1B1,0B1,1F2,1B2,0B2\n")
                         .value_or_throw("parse");
  const std::vector<SendBuffers> two = {{.activations = 2, .gradients = 2}};
  const Timeline t = simulate(s, unit_costs(s.shape), two);
  ASSERT_TRUE(t.deadlocked());
  EXPECT_NE(t.blocked[0].waiting_for.find("1F0"), std::string::npos) << t.blocked[0].waiting_for;
  EXPECT_EQ(send_buffers(s), (std::vector<SendBuffers>{{.activations = 3, .gradients = 3}}));
}

TEST(SendBuffers, ARankThatProducesNeedsOne) {
  const Schedule s = lowered(Kind::OneFOneB, {.pp = 2, .microbatches = 2});
  EXPECT_THROW(simulate(s, unit_costs(s.shape), std::vector<SendBuffers>(2)), Error);
}

}  // namespace
}  // namespace weft::schedule
