#pragma once
// `weft tune` (docs/planner.md, "weft tune"): the planner's ranking prunes the layouts of a job to
// a handful, short real trials of that handful pick the winner. The search is successive halving
// (Jamieson & Talwalkar 2016; Li et al. 2018, Hyperband's inner loop) with the simulator's
// prediction as the prior: the R best-predicted layouts run a short trial each, the faster half by
// measured step time run again with twice the timed steps, and so on until one is left or the
// budget (trials or seconds) is spent.
//
// Everything here is pure: the trial itself is a callback (cli/tune_command.cc runs it on every
// rank of the job), so the halving, the budget and the choice of the winner are unit-tested with
// fake measurements (tests/planner/tune_test.cc).

#include <functional>
#include <map>
#include <optional>
#include <ranges>
#include <string>
#include <utility>
#include <vector>

#include "weft/planner/config.h"

namespace weft::planner {

// One trial of one layout on the real machine, what a calibration refit learns from
// (planner/calibration_fit.h): the job and layout it ran, its step time and the largest peak
// memory of its ranks.
struct TrialMeasurement {
  Job job;
  layout::Layout config;
  double step_seconds = 0;  // s per training step: the layout's figure (CandidateRecord::figure)
  double peak_bytes = 0;    // bytes above the baseline, the largest of the ranks' peaks
  int timed_steps = 1;      // steps the figure was taken over: the refit's weight
};

// A layout the planner ranked feasible, with what it predicts.
struct TuneCandidate {
  layout::Layout config;
  double predicted_seconds = 0;      // step time
  double predicted_bytes = 0;        // the busiest rank's memory
  double predicted_rank0_bytes = 0;  // rank 0's
  int predicted_rank = 0;            // 1-based place in the planner's ranking
};

// What one trial of one layout measured (on every rank, reduced: rank 0 holds the job's view).
struct TrialResult {
  bool ok = true;
  std::string error;     // why it failed ("rank 1: std::bad_alloc"), when !ok
  bool stopped = false;  // a stop signal ended it: neither a measurement nor a failure
  // The trial's step time: the median of its timed steps, each the slowest rank's. Every step of a
  // trial does the same work, so the spread between them is the machine: its other jobs, and on a
  // virtual machine the host's. A run of days sees that machine, not its quietest seconds, and a
  // median over the steps is what the planner's time to train should match (the refit's
  // compute_scale then carries the machine's sustained speed against `weft calibrate`'s short
  // bursts). The fastest step, the figure before 2026-12-04, is stable where the quiet state is
  // the common one and not where it is the rare one: on the AVX-512 Xeon of 2026-12-04 the 16
  // layouts' steps were 87-97 ms on the median and 68-95 ms on a trial's fastest, in windows of
  // 70 ms lasting a few steps (docs/planner.md §12, "A layout's figure: the median step").
  double step_seconds = 0;
  double fastest_seconds = 0;  // the fastest timed step: the machine at its quietest
  double peak_bytes = 0;       // the largest rank's peak resident memory above its baseline
  double rank0_bytes = 0;      // rank 0's
  double wall_seconds = 0;     // the whole trial: build, warm-up, timed steps, teardown
  int steps = 0;               // timed steps
  // Every step's time in order, warm-up ones first (each the slowest rank's): what a reader needs
  // to tell a trend within a trial (a warm-up too short) from interference between trials.
  std::vector<double> step_series_seconds;
  // The machine's GEMM speed probed just before the trial (Cluster::gemm_speed; 0: not probed).
  double gemm_speed = 0;
};

struct HalvingOptions {
  // R: the candidates the first round runs (at most): the best-predicted of each tp x pp x dp
  // shape first, in the planner's order, then the best-predicted of the rest. The planner's error
  // on an uncalibrated machine is tens of percent, and its top 16 are often ZeRO, recomputation
  // and micro-batch variants of one or two shapes (this machine, 2 ranks: 14 of 16): a round
  // spread over the shapes measures what the prediction is least sure of.
  int initial = 16;
  int warmup = 2;          // untimed steps before each trial's timed ones
  int first_steps = 3;     // timed steps of the first round; doubled every round
  int max_trials = 0;      // the budget in trials; 0: none
  double max_seconds = 0;  // the budget in wall seconds; 0: none
  // Grid: every one of the R candidates once, at the trial length the last round of the halving
  // of R would have (final_round_steps), as the baseline the halving is compared with.
  bool grid = false;
  // The grid's passes: the R candidates run `passes` times, one pass over all of them after the
  // other, so that a layout's trials lie seconds apart. On a machine shared with other jobs a
  // phase lasts seconds (one host: one layout's fastest step measured 55-92 ms from one trial to
  // the next); each layout's figure pools its steps over the passes (CandidateRecord::figure),
  // what the planner is validated against. The first pass alone is the grid the halving is
  // compared with. Pass k (0-based) starts k * R / passes layouts into the planner's order.
  int passes = 1;
};

// Everything about one candidate after the search.
struct CandidateRecord {
  TuneCandidate candidate;
  std::vector<TrialResult> trials;  // in order; failed and stopped ones included
  int last_round = -1;              // the last round it ran in (-1: never ran)
  bool failed = false;              // a trial failed: out of the search from then on
  // Its successful trials (neither failed nor stopped), in order.
  auto successful() const {
    return trials | std::views::filter([](const TrialResult& t) { return t.ok && !t.stopped; });
  }
  // Its latest successful measurement (the longest trial), if any.
  const TrialResult* latest() const;
  // The layout's figure: the median of the timed steps of all its successful trials, pooled
  // (TrialResult::step_seconds says why the median); 0 without one. Its trials lie seconds to
  // minutes apart, so the pool spans more of the machine's phases than any one trial: on the
  // Xeon of 2026-12-04 a 24-step trial's median was within 10% of the pooled figure of 4 trials
  // 87.5% of the time, a 3-step window's 81%. A trial without its step series (the unit tests'
  // fakes) counts as `steps` steps of its step_seconds.
  double figure() const;
  // The fastest timed step of its successful trials (0 without one): reported beside the figure.
  double fastest() const;
  // Its memory figure: the least peak of its successful trials, on the busiest rank and on rank 0
  // (each the least of its own; zero without a successful trial). What one trial holds beyond the
  // layout's own is what the trials before it did to the process's heap, which only adds: on a
  // heap earlier trials left fragmented, a GEMM's packing buffer (allocated and freed by oneDNN
  // on every call) lands on free pages not yet resident, so tp2 mb8's trials measured up to 18
  // MiB above the same layout in a fresh process, one trial to the next (docs/planner.md §12).
  struct Memory {
    double peak_bytes = 0, rank0_bytes = 0;
  };
  Memory least_memory() const;
  // The timed steps of its successful trials, all of them: the refit's weight of its figure.
  int timed_steps() const;
};

struct TuneOutcome {
  std::vector<CandidateRecord> records;  // the candidates given, in the planner's order
  int rounds = 0;                        // rounds started
  int trials = 0;                        // trials run (failed ones included, stopped ones not)
  int steps = 0;                         // timed + warm-up steps run, over all trials
  bool budget_spent = false;             // the budget ended the search before one was left
  bool stopped = false;                  // a stop signal ended it
  std::vector<int> finalists;  // indices into records: the entrants of the last round started
  std::optional<int> winner;   // the fastest figure among the finalists
};

// Runs one trial of `c` with `warmup` untimed and `steps` timed steps.
using TrialRunner = std::function<TrialResult(const TuneCandidate& c, int warmup, int steps)>;
// Wall seconds since the search started (for the minutes budget).
using ElapsedClock = std::function<double()>;

// How many trials successive halving from n candidates runs when none fails: n + ceil(n/2) +
// ceil(n/4) + ... over the rounds that start with more than one candidate (one round for n = 1).
int halving_trials(int n);
// The number of rounds of halving from n candidates, and the timed steps of the last one.
int halving_rounds(int n);
int final_round_steps(int n, int first_steps);

// R for a budget: min(initial, candidates), reduced until halving_trials(R) fits max_trials.
int initial_candidates(int candidates, const HalvingOptions& o);

// The first round's entrants among `ranked` (the planner's order): `n` indices, ascending.
std::vector<int> first_round(const std::vector<TuneCandidate>& ranked, int n);

// Successive halving over `ranked` (best-predicted first): round k runs each entrant with
// first_steps * 2^k timed steps and keeps the faster half (ceil) of those that succeeded, by
// their figure so far (CandidateRecord::figure); a failed trial puts its layout out of the
// search, never ends it. Before each trial the budget is checked: no trial starts past max_trials,
// nor when the time spent plus the trial's estimate (its steps times its latest measured step
// time, else its prediction scaled by the measured/predicted ratio seen so far, plus the mean
// overhead of a trial) exceeds max_seconds. The winner is the fastest figure among the entrants
// of the last round (when the budget cuts a round short, its entrants not yet re-run compete with
// the trials they had). With o.grid, o.passes rounds each run every entrant not failed at the
// final length. `stop` (optional) is asked before each trial.

TuneOutcome successive_halving(const std::vector<TuneCandidate>& ranked, const HalvingOptions& o,
                               const TrialRunner& run, const ElapsedClock& elapsed,
                               const std::function<bool()>& stop = {});

// The run-config keys of a layout, as they are pasted: {"parallel", {{"tp", "1"}, ...}},
// {"train", {{"micro_batch", "2"}, {"recompute", "\"none\""}}}.
std::map<std::string, std::vector<std::pair<std::string, std::string>>> run_config_keys_of(
    const layout::Layout& c);
// The TOML text `text` with `keys` set: an existing `key = ...` line of the section is replaced
// (its comment kept after it), a missing key is added under the section's header, a missing
// section appended.
std::string set_toml_keys(
    const std::string& text,
    const std::map<std::string, std::vector<std::pair<std::string, std::string>>>& keys);

// Predicted against measured step time of every successful trial, log-log with the y = x line; a
// self-contained SVG document.
std::string render_tune_svg(const TuneOutcome& outcome, const std::string& title);

}  // namespace weft::planner
