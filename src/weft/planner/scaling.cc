#include "weft/planner/scaling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "weft/core/check.h"

namespace weft::planner {

std::string_view scaling_mode_name(ScalingMode m) {
  return m == ScalingMode::Weak ? "weak" : "strong";
}

Result<ScalingMode> parse_scaling_mode(std::string_view name) {
  if (name == "weak") return ScalingMode::Weak;
  if (name == "strong") return ScalingMode::Strong;
  return Status::error(fmt::format(
      "unknown scaling '{}': weak (the global batch grows with the devices) or strong (it stays)",
      name));
}

ScalingStudy scaling_study(const Cluster& cluster, const Job& job, ScalingMode mode,
                           const std::vector<int>& devices,
                           const std::optional<layout::Layout>& fixed, const SearchSpace& space,
                           const Options& model) {
  if (devices.empty()) throw Error("a scaling study needs at least one size (--gpus 128,256)");
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] <= 0 || (i > 0 && devices[i] <= devices[i - 1])) {
      throw Error(fmt::format("--gpus must be positive and increasing, got {} after {}", devices[i],
                              i > 0 ? devices[i - 1] : 0));
    }
  }
  ScalingStudy study{.mode = mode, .fixed = fixed, .points = {}};
  double first = 0;  // per-device tokens/s of the first feasible size
  for (int n : devices) {
    Job j = job;
    j.world = n;
    if (mode == ScalingMode::Weak) {
      j.global_batch = static_cast<int>(
          std::lround(static_cast<double>(job.global_batch) * n / devices.front()));
    }
    ScalingPoint pt;
    pt.devices = n;
    pt.global_batch = j.global_batch;
    if (fixed) {
      layout::Layout c = *fixed;
      c.dp = n / (c.tp * c.pp);
      if (n % (c.tp * c.pp) != 0 || c.dp < 1) {
        pt.why = fmt::format("{} devices are not divisible by tp*pp = {}", n, c.tp * c.pp);
      } else {
        if (c.dp == 1) c.zero = 0;  // ZeRO over a group of one is no ZeRO
        Prediction p = predict(cluster, j, c, model);
        if (p.feasible) {
          pt.best = std::move(p);
          pt.feasible = true;
        } else {
          for (const std::string& r : p.reasons) pt.why += (pt.why.empty() ? "" : "; ") + r;
        }
      }
    } else {
      SearchResult r = search(cluster, j, space, 1, model);
      if (r.ranked.empty()) {
        pt.why = fmt::format("no layout fits ({} candidates, {} infeasible)", r.candidates,
                             r.infeasible.size());
      } else {
        pt.best = std::move(r.ranked.front());
        pt.feasible = true;
      }
    }
    if (pt.feasible) {
      pt.tokens_per_s_per_device = pt.best.tokens_per_s / n;
      if (first == 0) first = pt.tokens_per_s_per_device;
      pt.efficiency = pt.tokens_per_s_per_device / first;
    }
    study.points.push_back(std::move(pt));
  }
  return study;
}

std::string format_scaling(const ScalingStudy& study, const Cluster& cluster, const Job& job) {
  // GFLOP/s when the devices are CPUs, by the first feasible size.
  const auto first = std::ranges::find_if(study.points, &ScalingPoint::feasible);
  const bool giga = first != study.points.end() && first->best.tflops_per_device < 1;
  std::string out =
      fmt::format("{} scaling of {} on {} ({}), {} tokens per sequence, {}; layout {}\n",
                  scaling_mode_name(study.mode), job.model.name, cluster.device, cluster.name,
                  job.seq_len, precision_name(job.precision),
                  study.fixed ? "held at " + short_name(*study.fixed) + " (dp grows)"
                              : std::string("searched at each size"));
  out += fmt::format("{:>7} {:>7}  {:<48} {:>9} {:>12} {:>8} {:>6} {:>10}\n", "devices", "batch",
                     "layout", "step s", "tokens/s/dev", giga ? "GFLOP/s" : "TFLOP/s", "MFU",
                     "efficiency");
  for (const ScalingPoint& p : study.points) {
    if (!p.feasible) {
      out += fmt::format("{:>7} {:>7}  infeasible: {}\n", p.devices, p.global_batch, p.why);
      continue;
    }
    out += fmt::format("{:>7} {:>7}  {:<48} {:>9.4g} {:>12.4g} {:>8.1f} {:>5.1f}% {:>9.1f}%\n",
                       p.devices, p.global_batch, short_name(p.best.config), p.best.time.total,
                       p.tokens_per_s_per_device, p.best.tflops_per_device * (giga ? 1e3 : 1),
                       100 * p.best.mfu, 100 * p.efficiency);
  }
  out +=
      "efficiency = tokens/s per device at that size / at the first feasible size (ideal: "
      "100%)\n";
  return out;
}

}  // namespace weft::planner
