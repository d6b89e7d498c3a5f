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
// alone (cold caches, threads contending, framework work between them), a multiplicative factor;
// each GEMM call passes over its weights again, from L3 or memory, which calibrate's GEMMs
// (timed on operands kept in cache) never do, a cost per call and so per microbatch; and each
// step pays a fixed cost the kernels leave out (the optimizer's bookkeeping, synchronization,
// the allocator, data loading), an additive one; and each tensor-parallel collective inside a
// step costs more than calibrate's collectives, which start on every rank together (the ranks
// meet there with the skew their kernels gathered since the last one), a cost per collective.
// Four parameters, fitted by least squares on
// log(measured / predicted) over the trials (relative error, so a 10 ms step counts as much as a
// 1 s one), each trial weighted by its timed steps (a layout's figure is the fastest of its
// trials' steps, planner/tune.h; the more steps, the likelier one ran undisturbed: successive
// halving's first-round trials of 3 steps measured up to 2x off on this shared machine, its
// final ones of 24 within 7%): Cluster::compute_scale, Cluster::weight_passes,
// Cluster::step_overhead and Cluster::tp_collective_overhead. Without the weight passes the
// factor alone left the error depending on the micro-batch size (this machine, 2 ranks: mb=1
// layouts predicted 11-15% too fast, mb=4-8 10-20% too slow); without the collectives' cost,
// on the tensor-parallel degree (tp2 layouts 6-17% too fast where dp2 layouts were within a
// few percent). Memory is not refitted here: the memory model's terms are byte counts of
// buffers, not machine constants.
//
//   Cluster c = load_cluster("configs/clusters/this-machine.toml").value();
//   Cluster fitted = refit_cluster(c, trials);   // fitted.calibration_note says what changed
//   write_text(to_toml(fitted, header));

#include <string>
#include <vector>

#include "weft/planner/hardware.h"
#include "weft/planner/tune.h"

namespace weft::planner {

// The planner's relative step-time error per trial: predicted / measured - 1 (same order).
// Throws weft::Error on the bad input refit_cluster rejects.
std::vector<double> step_time_errors(const Cluster& cluster,
                                     const std::vector<TrialMeasurement>& trials);

// `base` with compute_scale, weight_passes, step_overhead and tp_collective_overhead fitted to
// the trials (starting again from 1, 0, 0 and 0: a refit of a refitted preset gives the same
// factors, it does not compound them) and calibration_note saying what was fitted and how well.
// The overhead is fitted only when the trials' predicted step times differ by at least
// kMinSpreadForOverhead (a fixed cost and a factor cannot be told apart on steps of one length);
// the weight passes only when the share of the step one pass takes differs between the trials by
// at least kMinShareSpreadForWeightPasses (on trials of one microbatch count and one weight size
// per rank they are a fixed cost per step too); the collectives' cost only when its share differs
// by at least kMinShareSpreadForTp; a parameter not fitted keeps base's value (0 on a preset
// never refitted) and the others are fitted with it. Throws
// weft::Error, saying what to change, when there are no trials, a step time is not a positive
// finite number, or the planner cannot price a trial's layout.
Cluster refit_cluster(const Cluster& base, const std::vector<TrialMeasurement>& trials);

// Why trials run by `processes` processes of `threads` kernel threads each on a node of `cores`
// cores must not refit a preset, or "" when they may: with more threads than cores the ranks take
// turns on the cores, so a step measures the sharing, not the machine (4 ranks on this machine's
// 2 cores fitted compute_scale 2.98, then 0.0008 minutes later, against 1.22 from 2 ranks).
std::string refit_refusal(int processes, int threads, int cores);

// The guards of the parameters beyond the scale. A parameter is fitted only when the trials
// spread in what it changes beyond what the parameters already fitted can change: the spread is
// twice the weighted standard deviation, over the trials, of what is left of the parameter's
// effect on log(predicted step) after the best fit of it by the others' (for two equal halves of
// the trials, the difference between the halves; weighted by timed steps as the fit is, so one
// short trial apart from the rest does not make a parameter identifiable on its own). The
// overhead is decided first, against the scale; the passes then against the scale and, when it
// is fitted, the overhead.
//
// The overhead: the spread of log(predicted step) at least log(kMinSpreadForOverhead), as two
// halves whose steps are 1.2x apart. This machine's 2-rank trials (global batch 8: every layout
inline constexpr double kMinSpreadForOverhead = 1.2;
// The weight passes: the spread of the share of each trial's predicted step that one pass per
// GEMM call takes at least this: one pass more moves the trials' predictions apart by 6% or
// more, so 16 trials measured to about 5% each pin the passes down to about 0.2. This machine's
// 2-rank trials (mb 1-8 on tp 1-2): shares 0.04-0.23, spread 0.10-0.14. Trials of one
// microbatch count and one weight size per rank pay the same passes in every step, a fixed cost
// per step: with the overhead fitted, nothing is left of their spread. Once a preset has the
// passes, the planner ranks small micro-batches low and a tune's best-ranked layouts are all of
// large mb: then the passes are kept as they were, not fitted.
inline constexpr double kMinShareSpreadForWeightPasses = 0.06;
// The tensor-parallel collectives' cost (Cluster::tp_collective_overhead), decided last, against
// the scale and whichever of the overhead and the passes are fitted: the spread of the share of
// each trial's predicted step that a cost of 1% of the mean measured step per collective adds,
// at least this (the same 6% as the passes'). This machine's 2-rank trials: tp=1 layouts none,
// tp=2 layouts 19-72 collectives per step, shares 0-0.42. A tune of tensor-parallel layouts
// alone with one collective count per step cannot tell the cost from the scale: it is kept.
inline constexpr double kMinShareSpreadForTp = 0.06;

// How far the GEMM speed `weft tune` probes may lie from the speed its preset's factors were
// fitted at (Cluster::gemm_speed; 1 for a preset that does not say) before it warns that the
// preset may be another machine's: a factor of kForeignPresetSpeed either way. This machine's
// speed drifted by up to 12% between minutes; two hosts of its kind (both "AMD EPYC", 2 cores)
// differed 2.3x (GEMMs at 106-114 GFLOP/s per core on one, 176-247 on the other).
inline constexpr double kForeignPresetSpeed = 1.25;

}  // namespace weft::planner
