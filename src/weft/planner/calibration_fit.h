#pragma once
// The calibration refit (issue 16, docs/planner.md "Refitting from trials"): real training steps
// measured by `weft tune` correct a cluster preset, so the next `weft plan` on that machine
// predicts what it measured.
//
// What is refitted, and why only that: the kernel and link constants (peak rates, the GEMM
// model, memory bandwidth, link alpha/beta) are what `weft calibrate` measured one kernel or one
// message at a time, on shapes chosen to pin each one down; a handful of whole training steps
// cannot separate them again (every step mixes all of them). What steps do measure is how far a
// whole step is from the sum of its priced kernels: the kernels run slower inside a step than
// alone (cold caches, threads contending, framework work between them), a multiplicative factor,
// and each step pays a fixed cost the kernels leave out (the optimizer's bookkeeping,
// synchronization, the allocator, data loading), an additive one. Two factors, fitted by least
// squares on log(measured / predicted) over the trials (relative error, so a 10 ms step counts
// as much as a 1 s one), each trial weighted by its timed steps (the variance of a median of k
// steps falls as 1/k: successive halving's first-round trials of 3 steps measured up to 2x off
// on this shared machine, its final ones of 24 within 7%): Cluster::compute_scale and
// Cluster::step_overhead. Memory is not
// refitted here: the memory model's terms are byte counts of buffers, not machine constants.
//
//   Cluster c = load_cluster("configs/clusters/this-machine.toml").value();
//   Cluster fitted = refit_cluster(c, trials);   // fitted.calibration_note says what changed
//   write_text(to_toml(fitted, header));

#include <vector>

#include "weft/planner/hardware.h"
#include "weft/planner/tune.h"

namespace weft::planner {

// The planner's relative step-time error per trial: predicted / measured - 1 (same order).
// Throws weft::Error on the bad input refit_cluster rejects.
std::vector<double> step_time_errors(const Cluster& cluster,
                                     const std::vector<TrialMeasurement>& trials);

// `base` with compute_scale and step_overhead fitted to the trials (starting again from 1 and 0:
// a refit of a refitted preset gives the same factors, it does not compound them) and
// calibration_note saying what was fitted and how well. The overhead is fitted only when the
// trials' predicted step times differ by at least kMinSpreadForOverhead (a fixed cost and a
// factor cannot be told apart on steps of one length); else only the factor. Throws
// weft::Error, saying what to change, when there are no trials, a step time is not a positive
// finite number, or the planner cannot price a trial's layout.
Cluster refit_cluster(const Cluster& base, const std::vector<TrialMeasurement>& trials);

// Longest / shortest predicted step time over the trials needed to fit the overhead too.
inline constexpr double kMinSpreadForOverhead = 1.2;

}  // namespace weft::planner
