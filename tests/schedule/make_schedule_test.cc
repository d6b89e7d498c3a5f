// The generators: their preconditions, their invariants over a sweep of shapes, and the
// makespan, bubble and peak-memory formulas of docs/schedules.md.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "weft/schedule/schedule.h"
#include "weft/schedule/simulate.h"

namespace weft::schedule {
namespace {

// The preconditions, restated independently of check_shape().
bool generable(Kind kind, const Shape& s) {
  switch (kind) {
    case Kind::GPipe:
      return s.vp == 1;
    case Kind::OneFOneB:
    case Kind::ZeroBubbleH1:
      return s.vp == 1 && s.microbatches >= s.pp;
    case Kind::Interleaved:
      return s.vp >= 2 && s.microbatches % s.pp == 0;
  }
  return false;
}

// Every (kind, shape) of the sweep the issue asks for, that can be generated.
template <typename F>
void for_each_schedule(F f) {
  for (Kind kind : all_kinds()) {
    for (int pp = 1; pp <= 8; ++pp) {
      for (int vp : {1, 2, 4}) {
        for (int m = 1; m <= 24; ++m) {
          const Shape shape{.pp = pp, .vp = vp, .microbatches = m};
          if (generable(kind, shape)) f(kind, shape);
        }
      }
    }
  }
}

std::string name(Kind kind, const Shape& s) {
  return std::string(kind_name(kind)) + " pp=" + std::to_string(s.pp) +
         " vp=" + std::to_string(s.vp) + " m=" + std::to_string(s.microbatches);
}

Schedule make(Kind kind, const Shape& shape) {
  return make_schedule(kind, shape).value_or_throw("make_schedule");
}

std::string problems(Kind kind, const Shape& shape) {
  Result<Schedule> r = make_schedule(kind, shape);
  return r.ok() ? "" : r.status().message();
}

TEST(MakeSchedule, EverySweptShapeValidatesBeforeAndAfterLowering) {
  int generated = 0;
  for (Kind kind : all_kinds()) {
    for (int pp = 1; pp <= 8; ++pp) {
      for (int vp : {1, 2, 4}) {
        for (int m = 1; m <= 24; ++m) {
          const Shape shape{.pp = pp, .vp = vp, .microbatches = m};
          Result<Schedule> r = make_schedule(kind, shape);
          ASSERT_EQ(r.ok(), generable(kind, shape))
              << name(kind, shape) << ": " << r.status().message();
          if (!r.ok()) {
            EXPECT_FALSE(r.status().problems().empty());
            continue;
          }
          ++generated;
          const Schedule& compute_only = r.value();
          EXPECT_EQ(compute_only.kind, kind);
          EXPECT_EQ(compute_only.shape, shape);
          const Status plain = validate(compute_only);
          ASSERT_TRUE(plain.ok()) << name(kind, shape) << "\n" << plain.message();
          const Status lowered = validate(add_optimizer_step(add_communication(compute_only)));
          ASSERT_TRUE(lowered.ok()) << name(kind, shape) << "\n" << lowered.message();
        }
      }
    }
  }
  // gpipe 8*24, 1f1b and zb-h1 sum(25-pp) each, interleaved 2 * sum(24/pp).
  EXPECT_EQ(generated, 192 + 164 + 164 + 128);
}

TEST(MakeSchedule, InterleavedNeedsMicrobatchesAMultipleOfPp) {
  const std::string message = problems(Kind::Interleaved, {.pp = 4, .vp = 2, .microbatches = 6});
  EXPECT_NE(message.find("microbatches=6 is not divisible by pp=4"), std::string::npos) << message;
  EXPECT_NE(message.find("try 4 or 8"), std::string::npos) << message;
}

TEST(MakeSchedule, InterleavedNeedsTwoOrMoreChunks) {
  const std::string message = problems(Kind::Interleaved, {.pp = 4, .vp = 1, .microbatches = 8});
  EXPECT_NE(message.find("interleaved needs vp >= 2"), std::string::npos) << message;
}

TEST(MakeSchedule, PipelinedKindsNeedAtLeastPpMicrobatches) {
  for (Kind kind : {Kind::OneFOneB, Kind::ZeroBubbleH1}) {
    const std::string message = problems(kind, {.pp = 4, .vp = 1, .microbatches = 3});
    EXPECT_NE(message.find("microbatches=3 < pp=4"), std::string::npos) << message;
  }
  EXPECT_TRUE(problems(Kind::GPipe, {.pp = 4, .vp = 1, .microbatches = 3}).empty());
  const std::string interleaved =
      problems(Kind::Interleaved, {.pp = 4, .vp = 2, .microbatches = 2});
  EXPECT_NE(interleaved.find("microbatches=2 < pp=4"), std::string::npos) << interleaved;
  EXPECT_NE(interleaved.find("try 4"), std::string::npos) << interleaved;
}

TEST(MakeSchedule, ChunksNeedTheInterleavedKind) {
  for (Kind kind : {Kind::GPipe, Kind::OneFOneB, Kind::ZeroBubbleH1}) {
    const std::string message = problems(kind, {.pp = 2, .vp = 2, .microbatches = 4});
    EXPECT_NE(message.find("vp=2 model chunks per rank needs kind interleaved"), std::string::npos)
        << message;
  }
}

TEST(MakeSchedule, ReportsEveryProblemTogether) {
  Result<Schedule> r = make_schedule(Kind::OneFOneB, {.pp = 0, .vp = 0, .microbatches = 0});
  ASSERT_FALSE(r.ok());
  const auto& list = r.status().problems();
  ASSERT_EQ(list.size(), 3u) << r.status().message();
  EXPECT_EQ(list[0], "pp=0 must be at least 1");
  EXPECT_EQ(list[1], "vp=0 must be at least 1");
  EXPECT_EQ(list[2], "microbatches=0 must be at least 1");

  Result<Schedule> two = make_schedule(Kind::OneFOneB, {.pp = 4, .vp = 2, .microbatches = 2});
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().problems().size(), 2u) << two.status().message();
}

TEST(MakeSchedule, EveryRankRunsOnlyItsOwnStagesComputeOnly) {
  const Schedule s = make(Kind::Interleaved, {.pp = 4, .vp = 2, .microbatches = 8});
  ASSERT_EQ(s.programs.size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(s.programs[rank].size(), 2u * 8u * 2u);
    for (const Instr& in : s.programs[rank]) {
      EXPECT_TRUE(is_compute(in.op));
      EXPECT_EQ(in.stage % 4, rank);
      EXPECT_EQ(in.peer, -1);
    }
  }
}

// --- Makespans with uniform stages and free messages (docs/schedules.md, "Bubbles"). ---

TEST(MakeSchedule, GpipeAnd1f1bTakeMPlusPMinus1Rounds) {
  for (Kind kind : {Kind::GPipe, Kind::OneFOneB}) {
    for (int pp = 1; pp <= 8; ++pp) {
      for (int m = 1; m <= 24; ++m) {
        const Shape shape{.pp = pp, .vp = 1, .microbatches = m};
        if (!generable(kind, shape)) continue;
        const Schedule s = make(kind, shape);
        for (auto [tf, tb] : {std::pair{1.0, 1.0}, {1.0, 2.0}, {2.0, 3.0}}) {
          const Timeline t = simulate(s, uniform_costs(shape, {.forward = tf, .backward = tb}));
          ASSERT_FALSE(t.deadlocked());
          EXPECT_DOUBLE_EQ(t.makespan, (m + pp - 1) * (tf + tb)) << name(kind, shape);
          EXPECT_DOUBLE_EQ(t.bubble_fraction, double(pp - 1) / m) << name(kind, shape);
        }
      }
    }
  }
}

TEST(MakeSchedule, InterleavingDividesTheBubbleByVp) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int vp : {2, 4}) {
      for (int m = pp; m <= 24; m += pp) {
        const Shape shape{.pp = pp, .vp = vp, .microbatches = m};
        const Schedule s = make(Kind::Interleaved, shape);
        // A chunk is 1/vp of the rank's layers: the whole rank's tf, tb are vp times a chunk's.
        for (auto [f, b] : {std::pair{1.0, 1.0}, {1.0, 2.0}, {2.0, 1.0}}) {
          const Timeline t = simulate(s, uniform_costs(shape, {.forward = f, .backward = b}));
          ASSERT_FALSE(t.deadlocked());
          const double tf = vp * f, tb = vp * b;
          EXPECT_DOUBLE_EQ(t.makespan, m * (tf + tb) + (pp - 1) * (tf + tb) / vp)
              << name(Kind::Interleaved, shape);
          EXPECT_DOUBLE_EQ(t.bubble_fraction, double(pp - 1) / (vp * m))
              << name(Kind::Interleaved, shape);
        }
      }
    }
  }
}

TEST(MakeSchedule, ZbH1ShrinksTheBubbleByTwiceTheWeightGradientTime) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = pp; m <= 24; ++m) {
      const Shape shape{.pp = pp, .vp = 1, .microbatches = m};
      const Schedule zb = make(Kind::ZeroBubbleH1, shape);
      const Schedule one = make(Kind::OneFOneB, shape);
      // Qi et al.'s bubble (pp-1)(tF+tI-tW) holds while tW <= tF and tW <= tI.
      for (auto [f, i, w] : {std::tuple{1.0, 1.0, 1.0},
                             {2.0, 1.0, 1.0},
                             {1.0, 2.0, 1.0},
                             {1.0, 1.0, 0.5},
                             {3.0, 2.0, 2.0}}) {
        const StageCosts c{
            .forward = f, .backward = i + w, .backward_input = i, .backward_weight = w};
        const Timeline tz = simulate(zb, uniform_costs(shape, c));
        const Timeline t1 = simulate(one, uniform_costs(shape, c));
        ASSERT_FALSE(tz.deadlocked());
        EXPECT_DOUBLE_EQ(tz.makespan, m * (f + i + w) + (pp - 1) * (f + i - w))
            << name(Kind::ZeroBubbleH1, shape) << " f=" << f << " i=" << i << " w=" << w;
        EXPECT_DOUBLE_EQ(t1.makespan - tz.makespan, 2 * (pp - 1) * w);
      }
    }
  }
}

// --- Peak in-flight (stage, microbatch) pairs per rank (docs/schedules.md, "Memory"). ---

TEST(MakeSchedule, PeakInFlightMatchesTheDerivedFormulas) {
  for_each_schedule([](Kind kind, const Shape& shape) {
    const int pp = shape.pp, vp = shape.vp, m = shape.microbatches;
    const Schedule s = make(kind, shape);
    const std::vector<int> peaks = peak_in_flight(s);
    // Lowering and the step's end allocate nothing: same peaks.
    EXPECT_EQ(peak_in_flight(add_optimizer_step(add_communication(s))), peaks);
    ASSERT_EQ(static_cast<int>(peaks.size()), pp);
    for (int r = 0; r < pp; ++r) {
      int expected = 0;
      switch (kind) {
        case Kind::GPipe:
          expected = m;
          break;
        case Kind::OneFOneB:
          expected = std::min(pp - r, m);
          break;
        case Kind::Interleaved:
          // Megatron's warm-up, (pp-r-1)*2 + (vp-1)*pp, plus the steady state's one.
          expected = std::min((pp - r - 1) * 2 + (vp - 1) * pp + 1, m * vp);
          break;
        case Kind::ZeroBubbleH1:
          // (pp-r-1) warm-up + 1 + r deferred weight gradients.
          expected = pp;
          break;
      }
      EXPECT_EQ(peaks[r], expected) << name(kind, shape) << " rank " << r;
    }
  });
}

TEST(MakeSchedule, ZbH1PeaksNoHigherThan1f1b) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = pp; m <= 24; ++m) {
      const Shape shape{.pp = pp, .vp = 1, .microbatches = m};
      const auto zb = peak_in_flight(make(Kind::ZeroBubbleH1, shape));
      const auto one = peak_in_flight(make(Kind::OneFOneB, shape));
      EXPECT_EQ(*std::max_element(zb.begin(), zb.end()), *std::max_element(one.begin(), one.end()));
    }
  }
}

}  // namespace
}  // namespace weft::schedule
