// weft tune's search (planner/tune.h) on fake predictions and fake measurements: who survives each
// round of the halving, who wins, how the budget cuts it, and that a failed layout neither wins
// nor ends the search.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weft/planner/tune.h"

namespace weft::planner {
namespace {

// Candidate i: predicted step (i + 1) ms (the planner's order), micro batch i + 1 to tell them
// apart.
std::vector<TuneCandidate> ranked(int n) {
  std::vector<TuneCandidate> c(n);
  for (int i = 0; i < n; ++i) {
    c[i].config.micro_batch = i + 1;
    c[i].predicted_seconds = (i + 1) * 1e-3;
    c[i].predicted_rank = i + 1;
  }
  return c;
}

// A machine on which candidate i's step takes measured[i] seconds (negative: the trial fails),
// and a clock that advances by each trial's steps.
struct FakeMachine {
  explicit FakeMachine(std::vector<double> m) : measured(std::move(m)) {}
  std::vector<double> measured;
  // Interference: the trial of call k (0-based, in order) measures slow[k] times its step.
  std::map<int, double> slow;
  double now = 0;
  std::vector<std::pair<int, int>> calls;  // (candidate, timed steps)
  TrialRunner runner() {
    return [this](const TuneCandidate& c, int warmup, int steps) {
      const int i = c.config.micro_batch - 1;
      const auto k = slow.find(static_cast<int>(calls.size()));
      const double factor = k == slow.end() ? 1.0 : k->second;
      calls.emplace_back(i, steps);
      TrialResult r;
      r.steps = steps;
      if (measured[i] < 0) {
        r.ok = false;
        r.error = "rank 1: std::bad_alloc";
        now += 0.1;
        return r;
      }
      r.step_seconds = measured[i] * factor;
      r.fastest_seconds = r.step_seconds;
      r.wall_seconds = (warmup + steps) * r.step_seconds;
      now += r.wall_seconds;
      return r;
    };
  }
  ElapsedClock clock() {
    return [this] { return now; };
  }
};

int winner_candidate(const TuneOutcome& o) {
  return o.winner ? o.records[*o.winner].candidate.config.micro_batch - 1 : -1;
}

TEST(TuneTest, HalvingCountsItsTrialsAndRounds) {
  EXPECT_EQ(halving_trials(1), 1);
  EXPECT_EQ(halving_trials(2), 2);
  EXPECT_EQ(halving_trials(3), 5);    // 3, 2
  EXPECT_EQ(halving_trials(16), 30);  // 16, 8, 4, 2
  EXPECT_EQ(halving_rounds(16), 4);
  EXPECT_EQ(final_round_steps(16, 3), 24);
  EXPECT_EQ(initial_candidates(40, {.initial = 16}), 16);
  EXPECT_EQ(initial_candidates(5, {.initial = 16}), 5);
  EXPECT_EQ(initial_candidates(40, {.initial = 16, .max_trials = 4}), 2);
  EXPECT_EQ(initial_candidates(40, {.initial = 16, .max_trials = 6}), 4);
}

TEST(TuneTest, TheWinnerIsTheMeasuredFastestNotThePredictedFastest) {
  // The planner's order is 0..7; the machine's fastest is 5, then 2, then 7.
  FakeMachine m{{8, 7, 2, 6, 5, 1, 4, 3}};
  const TuneOutcome o =
      successive_halving(ranked(8), {.initial = 8, .first_steps = 3}, m.runner(), m.clock());
  EXPECT_EQ(winner_candidate(o), 5);
  EXPECT_EQ(o.trials, 8 + 4 + 2);
  EXPECT_EQ(o.rounds, 3);
  EXPECT_FALSE(o.budget_spent);
  // Round 2 runs the 4 measured fastest (5, 2, 7, 6) with 6 steps, round 3 the best 2 with 12.
  std::map<int, int> steps_of;
  for (auto [c, s] : m.calls) steps_of[c] = s;
  EXPECT_EQ(steps_of[5], 12);
  EXPECT_EQ(steps_of[2], 12);
  EXPECT_EQ(steps_of[7], 6);
  EXPECT_EQ(steps_of[6], 6);
  EXPECT_EQ(steps_of[0], 3);
  EXPECT_EQ(o.finalists, std::vector<int>{5});
}

TEST(TuneTest, TheFirstRoundRunsTheBestPredicted) {
  FakeMachine m{{1, 2, 3, 4, 5, 6, 7, 8, 0.5, 0.5}};
  const TuneOutcome o =
      successive_halving(ranked(10), {.initial = 4, .first_steps = 3}, m.runner(), m.clock());
  // Candidates 8 and 9 are faster, but the planner placed them outside the first 4.
  EXPECT_EQ(winner_candidate(o), 0);
  for (auto [c, s] : m.calls) EXPECT_LT(c, 4);
  EXPECT_EQ(o.records[8].trials.size(), 0u);
}

// The first round takes the best-predicted layout of each tp x pp x dp shape before a second
// variant of any: here the planner's top 6 are all tp=2, then two dp=2 and two pp=2 layouts.
TEST(TuneTest, TheFirstRoundSpreadsOverTheShapes) {
  std::vector<TuneCandidate> c = ranked(10);
  for (int i = 0; i < 6; ++i) c[i].config.tp = 2;
  for (int i = 6; i < 8; ++i) c[i].config.dp = 2;
  for (int i = 8; i < 10; ++i) c[i].config.pp = 2;
  EXPECT_EQ(first_round(c, 4), (std::vector<int>{0, 1, 6, 8}));
  EXPECT_EQ(first_round(c, 2), (std::vector<int>{0, 6}));
  EXPECT_EQ(first_round(c, 20).size(), 10u);
  FakeMachine m{{1, 2, 3, 4, 5, 6, 7, 8, 0.5, 0.6}};
  const TuneOutcome o =
      successive_halving(c, {.initial = 4, .first_steps = 3}, m.runner(), m.clock());
  // The pp=2 layout the planner ranked 9th measures fastest and wins.
  EXPECT_EQ(winner_candidate(o), 8);
  EXPECT_EQ(o.records[2].trials.size(), 0u);
}

TEST(TuneTest, AFailedLayoutIsRecordedAndTheSearchGoesOn) {
  // The measured fastest would be 1, but it fails (e.g. out of memory).
  FakeMachine m{{3, -1, 2, 4}};
  const TuneOutcome o =
      successive_halving(ranked(4), {.initial = 4, .first_steps = 2}, m.runner(), m.clock());
  EXPECT_EQ(winner_candidate(o), 2);
  EXPECT_TRUE(o.records[1].failed);
  EXPECT_EQ(o.records[1].trials.at(0).error, "rank 1: std::bad_alloc");
  EXPECT_EQ(o.records[1].latest(), nullptr);
  // 3 succeeded in round 1: the best 2 of them (2, 0) meet again.
  EXPECT_EQ(o.trials, 4 + 2);
}

TEST(TuneTest, NoWinnerWhenEveryLayoutFails) {
  FakeMachine m{{-1, -1}};
  const TuneOutcome o = successive_halving(ranked(2), {.initial = 2}, m.runner(), m.clock());
  EXPECT_FALSE(o.winner.has_value());
  EXPECT_EQ(o.trials, 2);
}

TEST(TuneTest, TheTrialBudgetIsNeverExceeded) {
  for (int budget : {1, 2, 3, 4, 7, 30}) {
    FakeMachine m{{8, 7, 2, 6, 5, 1, 4, 3, 9, 10, 11, 12, 13, 14, 15, 16}};
    const TuneOutcome o = successive_halving(ranked(16), {.initial = 16, .max_trials = budget},
                                             m.runner(), m.clock());
    EXPECT_LE(o.trials, budget) << budget;
    EXPECT_EQ(static_cast<int>(m.calls.size()), o.trials) << budget;
    ASSERT_TRUE(o.winner.has_value()) << budget;
    // The winner is the measured fastest among those the budget let run.
    double fastest = 1e9;
    for (auto [c, s] : m.calls) fastest = std::min(fastest, m.measured[c]);
    EXPECT_EQ(m.measured[winner_candidate(o)], fastest) << budget;
  }
}

TEST(TuneTest, TheTimeBudgetStopsBeforeATrialThatWouldOverrunIt) {
  // Each step 1 s; the first round's trials cost 2 + 3 = 5 s each.
  FakeMachine m{{1, 1, 1, 1, 1, 1, 1, 1}};
  std::vector<TuneCandidate> c = ranked(8);
  for (auto& x : c) x.predicted_seconds = 1;
  const TuneOutcome o =
      successive_halving(c, {.initial = 8, .max_seconds = 12}, m.runner(), m.clock());
  EXPECT_EQ(o.trials, 2);
  EXPECT_TRUE(o.budget_spent);
  EXPECT_LE(m.now, 12);
  ASSERT_TRUE(o.winner.has_value());
}

TEST(TuneTest, ATrialBudgetShrinksTheFirstRoundSoTheHalvingFinishes) {
  FakeMachine m{{4, 3, 2, 1}};
  const TuneOutcome o =
      successive_halving(ranked(4), {.initial = 4, .max_trials = 5}, m.runner(), m.clock());
  // 5 trials: R = 3 (3 + 2), not 4 (4 + 2); candidates 0-2 run, then 2 and 1 meet again.
  EXPECT_EQ(o.trials, 5);
  EXPECT_EQ(winner_candidate(o), 2);
  EXPECT_FALSE(o.budget_spent);
}

TEST(TuneTest, ARoundCutByTheBudgetComparesItsEntrantsLatestMeasurements) {
  // 1 s predicted per step, no warm-up, 1 timed step first: round 1 takes 4 + 1 + 2 + 3 = 10 s
  // and keeps 1 and 2; round 2 (2 steps) runs 1 (2 s, 12 s in all), then 2 would need 4 s more.
  FakeMachine m{{4, 1, 2, 3}};
  std::vector<TuneCandidate> c = ranked(4);
  for (auto& x : c) x.predicted_seconds = 1;
  const TuneOutcome o = successive_halving(
      c, {.initial = 4, .warmup = 0, .first_steps = 1, .max_seconds = 13}, m.runner(), m.clock());
  EXPECT_TRUE(o.budget_spent);
  EXPECT_EQ(o.trials, 5);
  EXPECT_EQ(o.finalists, (std::vector<int>{1, 2}));
  EXPECT_EQ(winner_candidate(o), 1);
  EXPECT_EQ(o.records[2].trials.size(), 1u);
}

TEST(TuneTest, AStopEndsTheSearchWithTheTableSoFar) {
  FakeMachine m{{3, 2, 1, 4}};
  int asked = 0;
  const TuneOutcome o = successive_halving(ranked(4), {.initial = 4}, m.runner(), m.clock(),
                                           [&] { return ++asked > 2; });
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.trials, 2);
  EXPECT_EQ(winner_candidate(o), 1);
}

TEST(TuneTest, TheGridRunsEveryCandidateOnceAtTheFinalTrialLength) {
  FakeMachine m{{8, 7, 2, 6, 5, 1, 4, 3}};
  const TuneOutcome o = successive_halving(
      ranked(8), {.initial = 8, .first_steps = 3, .grid = true}, m.runner(), m.clock());
  EXPECT_EQ(o.trials, 8);
  for (auto [c, s] : m.calls) EXPECT_EQ(s, 12);  // 8 -> 4 -> 2: the third round's 3 * 4
  EXPECT_EQ(winner_candidate(o), 5);
}

// A layout's figure is the median of its successful trials' timed steps, pooled: a trial run in
// one of the machine's slow phases counts by its length, in the halving's rounds, for its winner
// and in a grid of several passes.
TEST(TuneTest, ALayoutsFigureIsTheMedianOfItsPooledSteps) {
  CandidateRecord r;
  const auto trial = [](std::vector<double> series, int steps, bool ok = true, bool stop = false) {
    TrialResult t;
    t.ok = ok;
    t.stopped = stop;
    t.steps = steps;
    t.step_series_seconds = std::move(series);
    t.fastest_seconds =
        *std::min_element(t.step_series_seconds.end() - steps, t.step_series_seconds.end());
    return t;
  };
  EXPECT_EQ(r.figure(), 0);
  EXPECT_EQ(r.fastest(), 0);
  // Warm-up steps first (9 s: not counted), then the timed ones: 1.0 1.2 5.0 | 1.3 1.4 1.5 6 7;
  // the failed and the stopped trial do not count, a trial without its series counts as `steps`
  // steps of its figure (2 x 1.45).
  r.trials = {trial({9, 9, 1.0, 1.2, 5.0}, 3), trial({9, 1.3, 1.4, 1.5, 6, 7}, 5),
              trial({0.1, 0.1}, 2, false), trial({0.2, 0.2}, 2, true, true)};
  TrialResult fake;
  fake.steps = 2;
  fake.step_seconds = 1.45;
  r.trials.push_back(fake);
  // Pooled, sorted: 1.0 1.2 1.3 1.4 1.45 1.45 1.5 5.0 6 7: the upper median of 10.
  EXPECT_DOUBLE_EQ(r.figure(), 1.45);
  EXPECT_DOUBLE_EQ(r.fastest(), 1.0);
  EXPECT_EQ(r.timed_steps(), 3 + 5 + 2);

  // Round 1 (calls 0-3, 1 step each) keeps 1 (1 s) and 0 (2 s), run again with 2 steps in that
  // order; 1's (call 4) runs 3x slow. By its fastest step 1 would win; pooled, its steps are
  // 1 3 3 and 0's 2 2 2.
  FakeMachine m{{2, 1, 4, 3}};
  m.slow = {{4, 3.0}};
  const TuneOutcome o =
      successive_halving(ranked(4), {.initial = 4, .first_steps = 1}, m.runner(), m.clock());
  ASSERT_EQ(m.calls.size(), 6u);
  EXPECT_EQ(m.calls[4].first, 1);
  EXPECT_EQ(winner_candidate(o), 0);
  EXPECT_EQ(o.records[1].figure(), 3);
  EXPECT_EQ(o.records[1].fastest(), 1);
  EXPECT_EQ(o.records[1].timed_steps(), 1 + 2);

  // Halving from 8: round 1 keeps 5, 2, 7, 6 (1, 2, 3, 4 s) and runs them again in that order
  // with 6 steps; 2's second trial (call 9) runs 5x slow. Pooled, 2's steps are 3 x 2 s and 6 x
  // 10 s, so round 3 is 5 and 7; by each one's fastest step it would be 5 and 2.
  FakeMachine h{{8, 7, 2, 6, 5, 1, 4, 3}};
  h.slow = {{9, 5.0}};
  const TuneOutcome oh =
      successive_halving(ranked(8), {.initial = 8, .first_steps = 3}, h.runner(), h.clock());
  EXPECT_EQ(winner_candidate(oh), 5);
  std::vector<int> third;
  for (size_t k = 12; k < h.calls.size(); ++k) third.push_back(h.calls[k].first);
  EXPECT_EQ(third, (std::vector<int>{5, 7}));
}

TEST(TuneTest, TheGridsPassesPoolEachLayoutsSteps) {
  // Three passes over 4 layouts, pass k starting k * 4 / 3 layouts in: 0 1 2 3, then 1 2 (3) 0,
  // then 2 (3) 0 1. Layout 3 fails in the first pass and is not run again. The first pass runs
  // layout 0 slow (0.5 s -> 2 s) and the second runs 1 slow (1 s -> 2 s), so the first pass
  // alone would pick 1; over the passes 0's steps are 6 x 2 s and 12 x 0.5 s.
  FakeMachine m{{0.5, 1, 3, -1}};
  m.slow = {{0, 4.0}, {4, 2.0}};
  const TuneOutcome o =
      successive_halving(ranked(4), {.initial = 4, .first_steps = 3, .grid = true, .passes = 3},
                         m.runner(), m.clock());
  EXPECT_EQ(o.trials, 4 + 3 + 3);
  EXPECT_EQ(o.rounds, 3);
  std::vector<int> order;
  for (auto [c, s] : m.calls) order.push_back(c);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 1, 2, 0, 2, 0, 1}));
  for (auto [c, s] : m.calls) EXPECT_EQ(s, 6);  // 4 -> 2: the second round's 3 * 2
  EXPECT_EQ(o.records[0].trials.size(), 3u);
  EXPECT_EQ(o.records[3].trials.size(), 1u);
  EXPECT_TRUE(o.records[3].failed);
  EXPECT_EQ(o.records[0].figure(), 0.5);
  EXPECT_EQ(o.records[1].figure(), 1);  // its second pass (call 4) ran 2x slow
  EXPECT_EQ(o.records[1].timed_steps(), 18);
  EXPECT_EQ(winner_candidate(o), 0);
  // One pass: the slow first trial of 0 decides.
  FakeMachine one{{0.5, 1, 3, -1}};
  one.slow = {{0, 4.0}};
  EXPECT_EQ(
      winner_candidate(successive_halving(ranked(4), {.initial = 4, .first_steps = 3, .grid = true},
                                          one.runner(), one.clock())),
      1);
}

TEST(TuneTest, ALayoutsMemoryIsItsLeastTrial) {
  // Four trials of one layout, as the grid's passes run it: the heap the earlier trials left adds
  // to some of them, on one rank or both. The figure is each statistic's least, not the fastest
  // trial's (the third: 90/80) nor the latest's, and a failed or stopped trial does not count.
  CandidateRecord r;
  const auto trial = [](double s, double peak, double rank0, bool ok = true, bool stop = false) {
    TrialResult t;
    t.ok = ok;
    t.stopped = stop;
    t.step_seconds = s;
    t.peak_bytes = peak;
    t.rank0_bytes = rank0;
    return t;
  };
  EXPECT_EQ(r.least_memory().peak_bytes, 0);
  r.trials = {trial(1.2, 96, 84), trial(1.1, 85, 85),        trial(1.0, 90, 80),
              trial(1.3, 94, 94), trial(0.9, 10, 10, false), trial(0.8, 20, 20, true, true)};
  EXPECT_EQ(r.least_memory().peak_bytes, 85);
  EXPECT_EQ(r.least_memory().rank0_bytes, 80);
}

TEST(TuneTest, TheWinnersKeysReplaceTheRunConfigsOwn) {
  const std::string run =
      "[model]\nconfig = \"tiny.toml\"\n\n[train]\nmicro_batch = 4  # sequences\nsteps = 10\n"
      "\n[run]\nout_dir = \"x\"\n";
  layout::Layout c;
  c.tp = 2;
  c.micro_batch = 1;
  c.recompute = model::Recompute::Selective;
  const std::string out = set_toml_keys(run, run_config_keys_of(c));
  EXPECT_NE(out.find("micro_batch = 1  # sequences\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[train]\nrecompute = \"selective\"\nmicro_batch"), std::string::npos) << out;
  EXPECT_NE(out.find("steps = 10"), std::string::npos) << out;
  EXPECT_NE(out.find("[parallel]\ntp = 2\npp = 1\ndp = 1\nvp = 1\nschedule = \"1f1b\"\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("micro_batch = 4"), std::string::npos) << out;
}

// Headers with blanks and comments, keys without blanks; comments, other tables' keys and lines
// that only begin like a header are left alone.
TEST(TuneTest, TheRunConfigsLinesAreReadAsTomlHasThem) {
  const std::string run =
      "# micro_batch = 3\n[data]\nmicro_batch = 9\nname = \"[train]\"\n"
      " [ train ]\t# tuned\n[data] x = 1\nmicro_batch=4\n";
  layout::Layout c;
  c.micro_batch = 2;
  const std::string out = set_toml_keys(run, run_config_keys_of(c));
  EXPECT_EQ(out.rfind("# micro_batch = 3\n[data]\nmicro_batch = 9\nname = \"[train]\"\n", 0), 0u)
      << out;
  // "[data] x = 1" is no header, so the line after it is still [train]'s.
  EXPECT_NE(out.find(" [ train ]\t# tuned\nrecompute = \"none\"\n[data] x = 1\nmicro_batch = 2\n"),
            std::string::npos)
      << out;
}

TEST(TuneTest, TheChartDrawsEveryTrialAndTheDiagonal) {
  FakeMachine m{{4e-3, 3e-3, 2e-3, 1e-3}};
  const TuneOutcome o = successive_halving(ranked(4), {.initial = 4}, m.runner(), m.clock());
  const std::string svg = render_tune_svg(o, "tiny <2 ranks>");
  EXPECT_NE(svg.find("tiny &lt;2 ranks&gt;"), std::string::npos);
  int circles = 0;
  for (size_t at = 0; (at = svg.find("<circle", at)) != std::string::npos; ++at) ++circles;
  // 4 + 2 trials, plus the legend: 2 rounds and the winner's ring.
  EXPECT_EQ(circles, 6 + 2 + 1);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
}

}  // namespace
}  // namespace weft::planner
