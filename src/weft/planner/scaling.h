#pragma once
// Scaling studies (`weft plan --scaling weak|strong --gpus 128,256,...`, docs/planner.md
// "Scaling"): the same model on growing numbers of devices of one cluster, each size priced
// with its best layout (search) or one layout held fixed (dp grows with the devices).
//   weak:   the global batch grows with the devices, B(N) = B(N0) * N / N0 (the work per device
//           stays; ideal: the same per-device throughput at every size);
//   strong: the global batch stays B(N0) (the work per device shrinks; ideal: the step time
//           falls as 1/N, again the same per-device throughput).
// Scaling efficiency at N = per-device throughput at N / per-device throughput at N0, the first
// size that has a feasible layout: the definition of Dash et al. (Frontier, 2023) and of
// Narayanan et al. (PTD-P, 2021, Fig. 14-15).

#include <optional>
#include <string>
#include <vector>

#include "weft/core/status.h"
#include "weft/planner/search.h"

namespace weft::planner {

enum class ScalingMode { Weak, Strong };
std::string_view scaling_mode_name(ScalingMode m);
Result<ScalingMode> parse_scaling_mode(std::string_view name);

struct ScalingPoint {
  int devices = 0;
  int global_batch = 0;
  bool feasible = false;
  std::string why;  // when not feasible: the layout's reasons or "no layout fits"
  Prediction best;  // the chosen (or fixed) layout's prediction, when feasible
  double tokens_per_s_per_device = 0;
  double efficiency = 0;  // per-device throughput / that of the first feasible point
};

struct ScalingStudy {
  ScalingMode mode = ScalingMode::Weak;
  std::optional<layout::Layout> fixed;  // tp, pp, vp, mb, ... held; dp = N / (tp*pp)
  std::vector<ScalingPoint> points;     // one per size, in the order asked
};

// `job` is the first size's job (job.world is ignored: the sizes are `devices`; its
// global_batch is the batch at devices[0]). Weak scaling rounds B(N) to the nearest integer.
// Errors (sizes not positive or not increasing) throw weft::Error.
ScalingStudy scaling_study(const Cluster& cluster, const Job& job, ScalingMode mode,
                           const std::vector<int>& devices,
                           const std::optional<layout::Layout>& fixed = std::nullopt,
                           const SearchSpace& space = {}, const Options& model = {});

// The table: devices, global batch, layout, step time, tokens/s per device, TFLOP/s per device,
// MFU, scaling efficiency.
std::string format_scaling(const ScalingStudy& study, const Cluster& cluster, const Job& job);

}  // namespace weft::planner
