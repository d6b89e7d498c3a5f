#include "weft/runtime/stragglers.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace weft::runtime {

StragglerWatch::StragglerWatch(comm::Communicator* world, std::vector<std::string> names)
    : world_(world), names_(std::move(names)), streak_(names_.size(), 0) {}

void StragglerWatch::add(const StepRecord& r) {
  compute_ += r.step_seconds - r.comm_seconds;
  comm_ += r.comm_seconds;
  ++steps_;
}

std::string StragglerWatch::end_interval(StepRecord& r) {
  const int n = static_cast<int>(names_.size());
  const double per_step = steps_ > 0 ? 1e3 / steps_ : 0.0;
  const double mine[2] = {compute_ * per_step, comm_ * per_step};
  compute_ = comm_ = 0;
  steps_ = 0;
  const std::vector<double> all = comm::all_gather_values(world_, mine);
  r.rank_compute_ms.resize(n);
  r.rank_comm_ms.resize(n);
  for (int k = 0; k < n; ++k) {
    r.rank_compute_ms[k] = all[2 * k];
    r.rank_comm_ms[k] = all[2 * k + 1];
  }
  if (n < 2) return "";
  // The lower median: of 2 ranks, the faster one (the upper would be the straggler itself).
  std::vector<double> sorted = r.rank_compute_ms;
  std::nth_element(sorted.begin(), sorted.begin() + (n - 1) / 2, sorted.end());
  const double median = sorted[(n - 1) / 2];
  std::string warning;
  for (int k = 0; k < n; ++k) {
    const bool slow = r.rank_compute_ms[k] > (1 + kStragglerMargin) * median;
    streak_[k] = slow ? streak_[k] + 1 : 0;
    if (streak_[k] != kStragglerIntervals) continue;
    warning += fmt::format(
        "{}weft train: warning: rank {} (world rank {}) is a straggler: its steps computed "
        "{:.1f} ms against the median {:.1f} ms (+{:.0f}%) for {} log intervals in a row, and "
        "the other ranks wait for it",
        warning.empty() ? "" : "\n", names_[k], k, r.rank_compute_ms[k], median,
        100 * (r.rank_compute_ms[k] / median - 1), kStragglerIntervals);
  }
  return warning;
}

}  // namespace weft::runtime
