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
  Options o;
  o.detailed = false;
  o.keep_timeline = false;
  o.time_infeasible = true;  // a trial that ran is priced even if the model says it cannot fit
  o.cache = &cache;
  std::vector<double> out;
  for (size_t i = 0; i < trials.size(); ++i) {
    const Prediction p = predict(c, trials[i].job, trials[i].config, o);
    if (!(p.time.total > 0)) {
      std::string why;
      for (const std::string& r : p.reasons) why += (why.empty() ? "" : "; ") + r;
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

Cluster with_factors(Cluster c, double scale, double overhead) {
  c.compute_scale = scale;
  c.step_overhead = overhead;
  return c;
}

double mean_abs(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += std::abs(x);
  return v.empty() ? 0 : sum / v.size();
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

namespace {
constexpr double kMaxLogScale = 13.8;  // log(1e6)
}  // namespace

Cluster refit_cluster(const Cluster& base, const std::vector<TrialMeasurement>& trials) {
  check_trials(trials);
  ScheduleCache cache;
  const size_t n = trials.size();
  // Parameters x = (log compute_scale, step_overhead / mean measured step): both of order 1.
  double mean_measured = 0, mean_steps = 0;
  for (const auto& t : trials) {
    mean_measured += t.step_seconds / n;
    mean_steps += std::max(1, t.timed_steps) / static_cast<double>(n);
  }
  // Weighted least squares: residual i scaled by sqrt(w_i), w_i = timed steps / their mean.
  std::vector<double> sqrt_w(n);
  for (size_t i = 0; i < n; ++i)
    sqrt_w[i] = std::sqrt(std::max(1, trials[i].timed_steps) / mean_steps);
  auto residuals = [&](const std::array<double, 2>& x) {
    const Cluster c = with_factors(base, std::exp(x[0]), x[1] * mean_measured);
    const std::vector<double> p = predicted_times(c, trials, cache);
    std::vector<double> r(n);
    for (size_t i = 0; i < n; ++i) r[i] = sqrt_w[i] * std::log(trials[i].step_seconds / p[i]);
    return r;
  };
  auto sse = [](const std::vector<double>& r) {
    double s = 0;
    for (double x : r) s += x * x;
    return s;
  };

  // Start: the kernel constants as calibrated (factors 1 and 0), the scale that centres the
  // log errors.
  const std::vector<double> r0 = residuals({0, 0});
  std::vector<double> before;
  double spread_lo = 1e300, spread_hi = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = trials[i].step_seconds / std::exp(r0[i] / sqrt_w[i]);
    spread_lo = std::min(spread_lo, p);
    spread_hi = std::max(spread_hi, p);
    before.push_back(p / trials[i].step_seconds - 1);
  }
  const bool fit_overhead = n >= 2 && spread_hi >= kMinSpreadForOverhead * spread_lo;
  double mean_r0 = 0;  // the weighted mean log error
  for (size_t i = 0; i < n; ++i) mean_r0 += sqrt_w[i] * r0[i] / n;
  std::array<double, 2> x = {mean_r0, 0};
  std::vector<double> r = residuals(x);
  double err = sse(r);

  // Levenberg-Marquardt on the two parameters (one when the overhead is not fitted), numerical
  // Jacobian; the overhead kept >= 0 (a negative fixed cost would make short steps negative).
  const int dims = fit_overhead ? 2 : 1;
  double lambda = 1e-3;
  constexpr double kStep = 1e-6;
  for (int it = 0; it < 100 && err > 0; ++it) {
    std::array<std::vector<double>, 2> J;
    for (int k = 0; k < dims; ++k) {
      std::array<double, 2> xh = x;
      xh[k] += kStep;
      const std::vector<double> rh = residuals(xh);
      J[k].resize(n);
      for (size_t i = 0; i < n; ++i) J[k][i] = (rh[i] - r[i]) / kStep;
    }
    double a[2][2] = {{0, 0}, {0, 0}}, g[2] = {0, 0};
    for (int k = 0; k < dims; ++k) {
      for (size_t i = 0; i < n; ++i) g[k] += J[k][i] * r[i];
      for (int l = 0; l < dims; ++l) {
        for (size_t i = 0; i < n; ++i) a[k][l] += J[k][i] * J[l][i];
      }
    }
    bool improved = false;
    for (int tries = 0; tries < 20 && !improved; ++tries) {
      double m[2][2] = {{a[0][0] * (1 + lambda), a[0][1]}, {a[1][0], a[1][1] * (1 + lambda)}};
      std::array<double, 2> step = {0, 0};
      if (dims == 1) {
        step[0] = -g[0] / m[0][0];
      } else {
        const double det = m[0][0] * m[1][1] - m[0][1] * m[1][0];
        step[0] = -(m[1][1] * g[0] - m[0][1] * g[1]) / det;
        step[1] = -(m[0][0] * g[1] - m[1][0] * g[0]) / det;
      }
      std::array<double, 2> xn = {x[0] + step[0], std::max(0.0, x[1] + step[1])};
      // A step off to a scale beyond 1e6 (or a singular system's NaN) is no fit: exp() of it
      // overflows, and an infinite scale times a zero-byte term prices a pass at NaN. Damp more.
      if (!(std::abs(xn[0]) < kMaxLogScale) || !std::isfinite(xn[1])) {
        lambda *= 4;
        continue;
      }
      const std::vector<double> rn = residuals(xn);
      const double en = sse(rn);
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

  Cluster fitted = with_factors(base, std::exp(x[0]), x[1] * mean_measured);
  std::vector<double> after;
  for (size_t i = 0; i < n; ++i) after.push_back(std::exp(-r[i] / sqrt_w[i]) - 1);
  fitted.calibration_note = fmt::format(
      "refitted from {} measured trials: compute_scale {:.4g} (kernels inside a step vs "
      "calibrated alone), step_overhead {} (per step); planner step-time error, mean of "
      "|predicted/measured - 1|: {:.1f}% before, {:.1f}% after",
      n, fitted.compute_scale,
      fit_overhead ? fmt::format("{:.4g} ms", fitted.step_overhead * 1e3)
                   : std::string("not fitted (the trials' steps are all of one length)"),
      100 * mean_abs(before), 100 * mean_abs(after));
  return fitted;
}

}  // namespace weft::planner
