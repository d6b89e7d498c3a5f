#include "weft/planner/gemm_fit.h"

#include <algorithm>

#include "weft/core/check.h"
#include "weft/planner/cost_model.h"

namespace weft::planner {

namespace {

double flops(const GemmSample& s) { return 2.0 * s.M * s.N * s.K; }

// The time the model predicts for `s` with `g` (gemm_time without a Cluster).
double model_time(const GemmModel& g, double peak, const GemmSample& s) {
  return std::max(g.min_time,
                  flops(s) / (peak * g.efficiency * gemm_shape_efficiency(g, s.M, s.N, s.K)));
}

// The predicted rate over the measured one, minus 1 (= measured time / predicted time - 1): the
// relative error the fit minimizes.
double gemm_rate_error(const GemmModel& g, double peak, const GemmSample& s) {
  return s.seconds / model_time(g, peak, s) - 1;
}

}  // namespace

double gemm_speed(const GemmModel& g, double peak, std::span<const GemmSample> samples) {
  WEFT_CHECK(!samples.empty() && peak > 0, "gemm_speed needs samples and a peak rate");
  double model = 0, measured = 0;
  for (const GemmSample& s : samples) {
    model += model_time(g, peak, s);
    measured += s.seconds;
  }
  return model / measured;
}

GemmModel fit_gemm_model(const GemmModel& base, double peak, std::span<const GemmSample> samples,
                         const GemmFitGrid& grid) {
  WEFT_CHECK(!samples.empty() && peak > 0, "fit_gemm_model needs samples and a peak rate");
  GemmModel best = base;
  double best_error = -1;
  std::vector<double> x(samples.size());
  for (const auto& [tile_m, tile_n] : grid.tiles) {
    for (int ki = 0; ki * grid.k_half_step <= grid.k_half_max; ++ki) {
      GemmModel g = base;
      g.tile_m = tile_m;
      g.tile_n = tile_n;
      g.k_half = ki * grid.k_half_step;
      for (size_t i = 0; i < samples.size(); ++i) {
        const GemmSample& s = samples[i];
        x[i] = s.seconds * peak * gemm_shape_efficiency(g, s.M, s.N, s.K) / flops(s);
      }
      for (int ti = 0; ti * grid.min_time_step <= grid.min_time_max * (1 + 1e-9); ++ti) {
        const double min_time = ti * grid.min_time_step;
        g.min_time = min_time;
        // Which shapes sit above the floor depends on the efficiency: iterate to a fixed point
        // (a few rounds; the sets only shrink or grow by shapes near the floor).
        double efficiency = 1;
        for (int round = 0; round < 8; ++round) {
          double sx = 0, sxx = 0;
          for (size_t i = 0; i < samples.size(); ++i) {
            // Above the floor: flops / (peak * efficiency * shape_efficiency) > min_time.
            if (samples[i].seconds / x[i] / efficiency > min_time) {
              sx += x[i];
              sxx += x[i] * x[i];
            }
          }
          if (sxx == 0) break;
          const double next = std::clamp(sx / sxx, 0.01, 1.0);
          if (next == efficiency) break;
          efficiency = next;
        }
        g.efficiency = efficiency;
        double error = 0;
        for (const GemmSample& s : samples) {
          const double e = gemm_rate_error(g, peak, s);
          error += e * e;
        }
        if (best_error < 0 || error < best_error) {
          best_error = error;
          best = g;
        }
      }
    }
  }
  return best;
}

}  // namespace weft::planner
