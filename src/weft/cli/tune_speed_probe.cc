#include "weft/cli/tune_speed_probe.h"

#include <algorithm>

#include "weft/planner/gemm_fit.h"

namespace weft::cli {

double SpeedProbe::probe(comm::Communicator* world, const planner::Cluster& c) {
  if (world) world->barrier();
  const runtime::GemmCeiling g = meter_.measure(1);
  std::vector<double> seconds;
  for (const auto& t : g.timings) seconds.push_back(t.seconds);
  if (world && world->size() > 1) {
    world->all_reduce(seconds.data(), static_cast<int64_t>(seconds.size()), comm::ReduceOp::Max);
  }
  std::vector<planner::GemmSample> samples;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const model::GemmShape& s = g.timings[i].shape;
    samples.push_back({s.M, s.N, s.K, seconds[i]});
  }
  const double now = planner::gemm_speed(c.gemm, c.peak(planner::NumberFormat::FP32), samples);
  fastest_ = std::max(fastest_, now);
  ++probes_;
  return now;
}

std::vector<model::GemmShape> SpeedProbe::costliest(std::vector<model::GemmShape> shapes) {
  std::stable_sort(shapes.begin(), shapes.end(),
                   [](const auto& a, const auto& b) { return a.flops() > b.flops(); });
  shapes.resize(std::min<size_t>(shapes.size(), kProbeShapes));
  return shapes;
}

}  // namespace weft::cli
