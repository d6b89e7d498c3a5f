#include "weft/planner/calibration_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "weft/core/check.h"
#include "weft/planner/simulate.h"

namespace weft::planner {
namespace {

// Predicted step times of the trials on `c` (the makespan alone: no bubble split, no timeline).
std::vector<double> predicted_times(const Cluster& c, const std::vector<TrialMeasurement>& trials,
                                    ScheduleCache& cache) {
  // A trial that ran is priced even if the model says it cannot fit.
  const Options o{.detailed = false, .time_infeasible = true, .cache = &cache};
  std::vector<double> out;
  for (size_t i = 0; i < trials.size(); ++i) {
    const Prediction p = predict(c, trials[i].job, trials[i].config, o);
    if (!(p.time.total > 0)) {
      const std::string why = fmt::format("{}", fmt::join(p.reasons, "; "));
      throw Error(fmt::format(
          "trial {} ({}): the planner cannot price this layout on {}{}{}; drop the trial or fix "
          "its layout",
          i + 1, to_string(trials[i].config), c.name, why.empty() ? "" : ": ", why));
    }
    out.push_back(p.time.total);
  }
  return out;
}

void check_trials(const std::vector<TrialMeasurement>& trials) {
  if (trials.empty()) {
    throw Error("no trials to refit the calibration from: run at least one trial (weft tune)");
  }
  for (size_t i = 0; i < trials.size(); ++i) {
    const double t = trials[i].step_seconds;
    if (!(t > 0) || !std::isfinite(t)) {
      throw Error(fmt::format(
          "trial {} ({}): measured step time {} s must be a positive finite number; drop the "
          "trial (a failed trial has no step time)",
          i + 1, to_string(trials[i].config), t));
    }
  }
}

// The refit's parameters, each of order 1 (hardware.h, [calibration]).
struct Factors {
  double log_scale = 0;      // log compute_scale
  double weight_passes = 0;  // passes over a GEMM's weight operand per call
  double overhead = 0;       // step_overhead / the mean measured step
  double tp = 0;             // tp_collective_overhead / (1% of the mean measured step)
};
constexpr int kParams = 4;

Cluster with_factors(Cluster c, const Factors& f, double mean_measured) {
  c.compute_scale = std::exp(f.log_scale);
  c.weight_passes = f.weight_passes;
  c.step_overhead = f.overhead * mean_measured;
  c.tp_collective_overhead = f.tp * mean_measured / 100;
  return c;
}

double& param(Factors& f, int k) {
  return k == 0 ? f.log_scale : k == 1 ? f.weight_passes : k == 2 ? f.overhead : f.tp;
}

// Solves a x = b for the k x k system (k <= kParams) by Gaussian elimination with partial
// pivoting; false when it is singular.
bool solve(std::array<std::array<double, kParams>, kParams> a, std::array<double, kParams> b, int k,
           std::array<double, kParams>& x) {
  for (int c = 0; c < k; ++c) {
    int p = c;
    for (int r = c + 1; r < k; ++r) {
      if (std::abs(a[r][c]) > std::abs(a[p][c])) p = r;
    }
    if (!(std::abs(a[p][c]) > 0)) return false;
    std::swap(a[p], a[c]);
    std::swap(b[p], b[c]);
    for (int r = c + 1; r < k; ++r) {
      const double f = a[r][c] / a[c][c];
      for (int j = c; j < k; ++j) a[r][j] -= f * a[c][j];
      b[r] -= f * b[c];
    }
  }
  for (int c = k - 1; c >= 0; --c) {
    double v = b[c];
    for (int j = c + 1; j < k; ++j) v -= a[c][j] * x[j];
    x[c] = v / a[c][c];
  }
  return true;
}

double mean_abs(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += std::abs(x);
  return v.empty() ? 0 : sum / v.size();
}

constexpr double kMaxLogScale = 13.8;  // log(1e6)

// Twice the weighted standard deviation of what is left of `x` after the best weighted least
// squares fit of it by a combination of `basis` (the sensitivities of the parameters already
// fitted; the scale's is a constant): how far the trials' predictions move apart under a
// parameter whose sensitivity is `x`, beyond what the others could move them. For two equal
// halves of the trials, the difference between the halves. Weighted as the fit weighs the trials
// (sqrt_w squared), so one short trial apart from the rest (a 3-step pipeline trial among 15
// flat ones) does not make a parameter identifiable on its own.
double residual_spread(const std::vector<double>& x, const std::vector<std::vector<double>>& basis,
                       const std::vector<double>& sqrt_w) {
  const int k = static_cast<int>(basis.size());
  std::array<std::array<double, kParams>, kParams> a{};
  std::array<double, kParams> b{}, c{};
  double w = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double wi = sqrt_w[i] * sqrt_w[i];
    w += wi;
    for (int j = 0; j < k; ++j) {
      b[j] += wi * basis[j][i] * x[i];
      for (int l = 0; l < k; ++l) a[j][l] += wi * basis[j][i] * basis[l][i];
    }
  }
  if (!solve(a, b, k, c)) c = {};  // degenerate basis (identical columns): the constant alone
  double var = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double e = x[i];
    for (int j = 0; j < k; ++j) e -= c[j] * basis[j][i];
    var += sqrt_w[i] * sqrt_w[i] * e * e;
  }
  return 2 * std::sqrt(var / w);
}

double sum_of_squares(const std::vector<double>& r) {
  double s = 0;
  for (double x : r) s += x * x;
  return s;
}

// The refit as weighted least squares over Factors: residual i is log(measured / predicted) of
// trial i, scaled by sqrt(w_i), w_i = timed steps / their mean.
struct RefitProblem {
  RefitProblem(const Cluster& base, const std::vector<TrialMeasurement>& trials)
      : base(base), trials(trials), n(trials.size()), sqrt_w(n) {
    double mean_steps = 0;
    for (const auto& t : trials) {
      mean_measured += t.step_seconds / n;
      mean_steps += std::max(1, t.timed_steps) / static_cast<double>(n);
    }
    for (size_t i = 0; i < n; ++i)
      sqrt_w[i] = std::sqrt(std::max(1, trials[i].timed_steps) / mean_steps);
  }

  std::vector<double> residuals(const Factors& f) {
    const std::vector<double> p =
        predicted_times(with_factors(base, f, mean_measured), trials, cache);
    std::vector<double> r(n);
    for (size_t i = 0; i < n; ++i) r[i] = sqrt_w[i] * std::log(trials[i].step_seconds / p[i]);
    return r;
  }

  const Cluster& base;
  const std::vector<TrialMeasurement>& trials;
  const size_t n;
  double mean_measured = 0;
  std::vector<double> sqrt_w;
  ScheduleCache cache;
};

// The parameters besides the scale that the trials can identify.
struct Identified {
  bool passes = false, overhead = false, tp = false;
};

// r0 and p0: the residuals and the predicted step times at the start (every factor at zero).
Identified identify(RefitProblem& pb, const std::vector<double>& r0,
                    const std::vector<double>& p0) {
  const size_t n = pb.n;
  std::vector<double> log_predicted, inverse_predicted;
  for (double p : p0) {
    log_predicted.push_back(std::log(p));
    inverse_predicted.push_back(1 / p);  // what a fixed cost per step changes log(p) by, per s
  }
  const std::vector<double> ones(n, 1.0);  // what the log scale changes log(p) by
  Identified fit;
  // The overhead is told apart from the scale by steps of different lengths.
  fit.overhead = n >= 2 && residual_spread(log_predicted, {ones}, pb.sqrt_w) >=
                               std::log(kMinSpreadForOverhead);
  // What one weight pass would add to each trial, as a share of its step (what it changes
  // log(p) by): the passes are told apart from the scale, and from the overhead when it is
  // fitted, only by trials whose shares differ beyond what those two can express (their
  // microbatches per step and weights per rank differ; with one microbatch count the passes cost
  // the same in every step, a fixed cost like the overhead).
  // The share of each trial's predicted step that one unit of a parameter adds (1 - p0 / p1).
  auto share_of = [&](const Factors& unit) {
    const std::vector<double> r1 = pb.residuals(unit);
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = 1 - std::exp((r1[i] - r0[i]) / pb.sqrt_w[i]);
    return out;
  };
  const std::vector<double> share = share_of({.weight_passes = 1});
  std::vector<std::vector<double>> others = {ones};
  if (fit.overhead) others.push_back(inverse_predicted);
  fit.passes =
      n >= 2 && residual_spread(share, others, pb.sqrt_w) >= kMinShareSpreadForWeightPasses;
  if (fit.passes) others.push_back(share);
  // The tensor-parallel collectives' cost: told apart by trials whose steps meet the other ranks
  // of a tensor-parallel group a different number of times per unit of step (tp = 1 against
  // tp > 1, sequence parallelism's four collectives per pass against two).
  fit.tp =
      n >= 2 && residual_spread(share_of({.tp = 1}), others, pb.sqrt_w) >= kMinShareSpreadForTp;
  return fit;
}

// A parameter the trials cannot identify keeps the preset's value, and the others are fitted
// with it (so a second refit gives the same values): trials that all ran one microbatch count
// (once the planner knows the passes, its best-ranked layouts are all of large mb) must not
// make the preset forget the passes that earlier trials measured. The scale starts where it
// centres the log errors.
Factors start_factors(RefitProblem& pb, const Identified& fit) {
  Factors x;
  if (!fit.passes) x.weight_passes = pb.base.weight_passes;
  if (!fit.overhead) x.overhead = pb.base.step_overhead / pb.mean_measured;
  if (!fit.tp) x.tp = pb.base.tp_collective_overhead / pb.mean_measured * 100;
  const std::vector<double> r_held = pb.residuals(x);
  for (size_t i = 0; i < pb.n; ++i)
    x.log_scale += pb.sqrt_w[i] * r_held[i] / pb.n;  // weighted mean log
  return x;
}

// Levenberg-Marquardt on the identified parameters from x, numerical Jacobian; the weight passes
// and the overhead kept >= 0 (a negative cost per call or per step would make short steps
// negative). Leaves the fit in x and returns its residuals.
std::vector<double> levenberg_marquardt(RefitProblem& pb, const Identified& fit, Factors& x) {
  std::vector<int> active = {0};  // indices into Factors (param())
  if (fit.passes) active.push_back(1);
  if (fit.overhead) active.push_back(2);
  if (fit.tp) active.push_back(3);
  const int dims = static_cast<int>(active.size());
  const size_t n = pb.n;
  std::vector<double> r = pb.residuals(x);
  double err = sum_of_squares(r);
  double lambda = 1e-3;
  constexpr double kStep = 1e-6;
  for (int it = 0; it < 100 && err > 0; ++it) {
    std::array<std::vector<double>, kParams> J;
    for (int k = 0; k < dims; ++k) {
      Factors xh = x;
      param(xh, active[k]) += kStep;
      const std::vector<double> rh = pb.residuals(xh);
      J[k].resize(n);
      for (size_t i = 0; i < n; ++i) J[k][i] = (rh[i] - r[i]) / kStep;
    }
    std::array<std::array<double, kParams>, kParams> a{};
    std::array<double, kParams> g{};
    for (int k = 0; k < dims; ++k) {
      for (size_t i = 0; i < n; ++i) g[k] += J[k][i] * r[i];
      for (int l = 0; l < dims; ++l) {
        for (size_t i = 0; i < n; ++i) a[k][l] += J[k][i] * J[l][i];
      }
    }
    bool improved = false;
    for (int tries = 0; tries < 20 && !improved; ++tries) {
      std::array<std::array<double, kParams>, kParams> m = a;
      std::array<double, kParams> minus_g{}, step{};
      for (int k = 0; k < dims; ++k) {
        m[k][k] *= 1 + lambda;
        minus_g[k] = -g[k];
      }
      Factors xn = x;
      bool ok = solve(m, minus_g, dims, step);
      for (int k = 0; k < dims && ok; ++k) param(xn, active[k]) += step[k];
      xn.weight_passes = std::max(0.0, xn.weight_passes);
      xn.overhead = std::max(0.0, xn.overhead);
      xn.tp = std::max(0.0, xn.tp);
      // A step off to a scale beyond 1e6 (or a singular system's NaN) is no fit: exp() of it
      // overflows, and an infinite scale times a zero-byte term prices a pass at NaN. Damp more.
      if (!ok || !(std::abs(xn.log_scale) < kMaxLogScale) || !std::isfinite(xn.weight_passes) ||
          !std::isfinite(xn.overhead) || !std::isfinite(xn.tp)) {
        lambda *= 4;
        continue;
      }
      const std::vector<double> rn = pb.residuals(xn);
      const double en = sum_of_squares(rn);
      if (std::isfinite(en) && en < err) {
        const bool converged = err - en < 1e-14 * (1 + err);
        x = xn;
        r = rn;
        err = en;
        lambda = std::max(lambda / 3, 1e-9);
        improved = true;
        if (converged) it = 100;
      } else {
        lambda *= 4;
      }
    }
    if (!improved) break;
  }
  return r;
}

// What a refit changed, and the planner's step-time errors (mean of |predicted/measured - 1|)
// before and after it.
std::string refit_note(const Cluster& fitted, size_t n, const Identified& fit, double before,
                       double after) {
  return fmt::format(
      "refitted from {} measured trials: compute_scale {:.4g} (kernels inside a step vs "
      "calibrated alone), weight_passes {}, step_overhead {}, tp_collective_overhead {}; planner "
      "step-time error, mean of |predicted/measured - 1|: {:.1f}% before, {:.1f}% after{}",
      n, fitted.compute_scale,
      fit.passes ? fmt::format("{:.4g} (per GEMM call, so per microbatch)", fitted.weight_passes)
                 : fmt::format("not fitted, kept at {:.4g} (one pass is too alike a share of "
                               "every trial's step)",
                               fitted.weight_passes),
      fit.overhead ? fmt::format("{:.4g} ms per step", fitted.step_overhead * 1e3)
                   : fmt::format("not fitted, kept at {:.4g} ms (the trials' steps are too alike "
                                 "in length)",
                                 fitted.step_overhead * 1e3),
      fit.tp ? fmt::format("{:.4g} us per tensor-parallel collective",
                           fitted.tp_collective_overhead * 1e6)
             : fmt::format("not fitted, kept at {:.4g} us (the trials meet their tensor-parallel "
                           "ranks alike often per step)",
                           fitted.tp_collective_overhead * 1e6),
      100 * before, 100 * after,
      fitted.gemm_speed > 0
          ? fmt::format("; the machine's GEMMs ran at {:.3g}x the GEMM model", fitted.gemm_speed)
          : "");
}

}  // namespace

std::vector<double> step_time_errors(const Cluster& cluster,
                                     const std::vector<TrialMeasurement>& trials) {
  check_trials(trials);
  ScheduleCache cache;
  const std::vector<double> predicted = predicted_times(cluster, trials, cache);
  std::vector<double> out;
  for (size_t i = 0; i < trials.size(); ++i) {
    out.push_back(predicted[i] / trials[i].step_seconds - 1);
  }
  return out;
}

std::string refit_refusal(int processes, int threads, int cores) {
  if (int64_t{processes} * threads <= cores) return "";
  return fmt::format(
      "{} process(es) x {} thread(s) share this node's {} core(s): the ranks take turns on the "
      "cores, so the trials measure the sharing, not the machine; refit from a tune whose "
      "processes x threads fit the cores (fewer ranks, or train.threads)",
      processes, threads, cores);
}

Cluster refit_cluster(const Cluster& base, const std::vector<TrialMeasurement>& trials) {
  check_trials(trials);
  RefitProblem pb(base, trials);
  // Start: the kernel constants as calibrated (factors 1, 0 and 0: whatever the preset held, so
  // a refit of a refit does not compound).
  const std::vector<double> r0 = pb.residuals({});
  std::vector<double> p0, before;
  for (size_t i = 0; i < pb.n; ++i) {
    p0.push_back(trials[i].step_seconds / std::exp(r0[i] / pb.sqrt_w[i]));
    before.push_back(p0[i] / trials[i].step_seconds - 1);
  }
  const Identified fit = identify(pb, r0, p0);
  Factors x = start_factors(pb, fit);
  const std::vector<double> r = levenberg_marquardt(pb, fit, x);

  // What the solver leaves of a cost the trials do not carry (1e-13 of the unit: 4e-11 us on
  // trials with none) is none.
  if (x.tp < 1e-9) x.tp = 0;
  Cluster fitted = with_factors(base, x, pb.mean_measured);
  std::vector<double> after;
  for (size_t i = 0; i < pb.n; ++i) after.push_back(std::exp(-r[i] / pb.sqrt_w[i]) - 1);
  fitted.calibration_note = refit_note(fitted, pb.n, fit, mean_abs(before), mean_abs(after));
  return fitted;
}

}  // namespace weft::planner
