#pragma once
// `weft tune` (issue 16): short real trials of the planner's best layouts, and what they measured.

#include "weft/planner/config.h"

namespace weft::planner {

// One trial of one layout on the real machine: the job and layout it ran, the mean time of its
// timed steps and the largest peak memory of its ranks.
struct TrialMeasurement {
  Job job;
  ParallelConfig config;
  double step_seconds = 0;  // s per training step, timed steps only (warm-up excluded)
  double peak_bytes = 0;    // bytes, the largest of the ranks' peaks
};

}  // namespace weft::planner
