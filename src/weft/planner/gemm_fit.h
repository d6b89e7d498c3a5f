#pragma once
// Fits the GEMM model's constants (docs/planner.md §3.1) to measured GEMM times: how the H200
// preset's [gemm] section was made (configs/clusters/h200.toml), reproducible in a test so that
// the shapes it was fitted on and the shapes it is checked on can be kept apart.
//
//   GemmModel g = fit_gemm_model(c.gemm, c.peak(NumberFormat::BF16), samples, GemmFitGrid{});

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "weft/planner/hardware.h"

namespace weft::planner {

struct GemmSample {
  int64_t M = 0, N = 0, K = 0;
  double seconds = 0;  // measured time of one call
};

// The candidates the fit tries for the constants it does not solve for in closed form.
struct GemmFitGrid {
  std::vector<std::pair<int, int>> tiles = {{64, 64},   {128, 64},  {64, 128}, {128, 128},
                                            {128, 256}, {256, 128}, {256, 256}};
  double k_half_step = 16, k_half_max = 512;          // k_half in {0, step, ..., max}
  double min_time_step = 1e-6, min_time_max = 40e-6;  // s
};

// Least squares on the relative rate error (measured time / predicted time - 1) over the samples:
// every (tile, k_half, min_time) of the grid, and for each the efficiency in closed form (on the
// shapes above the floor the error is efficiency * x - 1 with x = seconds * peak * shape_efficiency
// / flops, so the best efficiency is sum x / sum x^2; the set above the floor is iterated to a
// fixed point). `base` gives compute_units; the first best grid point wins ties, so the fit is
// deterministic.
GemmModel fit_gemm_model(const GemmModel& base, double peak, std::span<const GemmSample> samples,
                         const GemmFitGrid& grid = {});

// How fast the machine runs the samples against the model: the model's time of all of them over
// their measured time (> 1: faster than the model, which `weft calibrate` fitted at its own
// minute). The time-weighted mean, so a shape counts by how long it takes. Cluster::gemm_speed.
double gemm_speed(const GemmModel& g, double peak, std::span<const GemmSample> samples);

}  // namespace weft::planner
