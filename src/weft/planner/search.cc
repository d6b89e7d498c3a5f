#include "weft/planner/search.h"

#include "weft/core/clock.h"

#include <algorithm>
#include <cctype>
#include <chrono>

namespace weft::planner {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// "needs 93.2 GiB per device, has 80 (76.0 usable)" -> "needs # GiB per device, has # (# usable)":
// only standalone numbers go; digits that are part of a name ("bf16", "fp16", "1f1b", "zb-h1",
// "tf32") stay, whether the name starts or ends with them.
std::string reason_kind(const std::string& reason) {
  auto is_digit = [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; };
  auto is_alpha = [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)) != 0; };
  std::string out;
  size_t i = 0;
  while (i < reason.size()) {
    if (!is_digit(reason[i])) {
      out += reason[i++];
      continue;
    }
    size_t end = i;
    while (end < reason.size() && (is_digit(reason[end]) || reason[end] == '.')) ++end;
    const bool in_name = (i > 0 && (is_alpha(reason[i - 1]) || reason[i - 1] == '-')) ||
                         (end < reason.size() && is_alpha(reason[end]));
    if (in_name) {
      out.append(reason, i, end - i);
    } else {
      out += '#';
    }
    i = end;
  }
  return out;
}

}  // namespace

std::vector<layout::Layout> enumerate(const Job& job, const SearchSpace& space) {
  auto allowed = [](const std::vector<int>& only, int v) {
    return only.empty() || std::find(only.begin(), only.end(), v) != only.end();
  };
  std::vector<layout::Layout> out;
  for (int tp : divisors(job.world)) {
    if (tp > space.max_tp) break;
    if (!allowed(space.tps, tp)) continue;
    for (int pp : divisors(job.world / tp)) {
      if (pp > job.model.n_layer) break;
      if (!allowed(space.pps, pp)) continue;
      const int dp = job.world / (tp * pp);
      for (int b : space.micro_batches) {
        for (schedule::Kind kind : space.schedules) {
          if (pp == 1 && kind != schedule::Kind::OneFOneB) continue;  // all the same with pp = 1
          for (int vp : kind == schedule::Kind::Interleaved ? space.vps : std::vector<int>{1}) {
            for (model::Recompute r : space.recomputes) {
              for (bool sp : space.sequence_parallel) {
                if (sp && tp == 1) continue;
                for (int zero : space.zero_stages) {
                  if (dp == 1 && zero > 0) continue;
                  out.push_back({.tp = tp,
                                 .pp = pp,
                                 .dp = dp,
                                 .vp = vp,
                                 .micro_batch = b,
                                 .schedule = kind,
                                 .recompute = r,
                                 .sequence_parallel = sp,
                                 .zero = zero});
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

SearchResult search(const Cluster& cluster, const Job& job, const SearchSpace& space, int keep,
                    const Options& model) {
  const auto start = std::chrono::steady_clock::now();
  keep = std::max(keep, 1);
  SearchResult result;
  ScheduleCache cache;
  Options bound = model;
  bound.detailed = false;
  bound.keep_timeline = false;
  bound.time_infeasible = false;
  bound.cache = &cache;
  bound.bound_only = true;
  const std::vector<layout::Layout> candidates = enumerate(job, space);
  result.candidates = static_cast<int>(candidates.size());
  // Every candidate: validated, its memory checked, its stages priced; the feasible ones get a
  // lower bound on their step time.
  std::vector<Prediction> feasible;
  for (const layout::Layout& c : candidates) {
    Prediction p = predict(cluster, job, c, bound);
    if (p.feasible) {
      feasible.push_back(std::move(p));
    } else {
      for (const std::string& r : p.reasons) ++result.reason_counts[reason_kind(r)];
      result.infeasible.push_back(std::move(p));
    }
  }
  result.feasible = static_cast<int>(feasible.size());
  // Branch and bound: simulate in order of the bound until the bound exceeds the keep-th best
  // simulated step time; no later candidate can be faster than those.
  std::stable_sort(feasible.begin(), feasible.end(), [](const Prediction& a, const Prediction& b) {
    return a.time.total < b.time.total;
  });
  Options full = bound;
  full.bound_only = false;
  std::vector<double> best;  // the keep smallest step times so far, ascending
  for (const Prediction& candidate : feasible) {
    if (static_cast<int>(best.size()) >= keep && candidate.time.total > best.back()) break;
    Prediction p = predict(cluster, job, candidate.config, full);
    ++result.simulated;
    if (!p.feasible) continue;  // a deadlock would land here
    best.insert(std::upper_bound(best.begin(), best.end(), p.time.total), p.time.total);
    if (static_cast<int>(best.size()) > keep) best.pop_back();
    result.ranked.push_back(std::move(p));
  }
  // Fastest first; ties (same time) prefer less memory.
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const Prediction& a, const Prediction& b) {
                     if (a.time.total != b.time.total) return a.time.total < b.time.total;
                     return a.memory.total() < b.memory.total();
                   });
  if (static_cast<int>(result.ranked.size()) > keep) result.ranked.resize(keep);
  Options detailed = full;
  detailed.detailed = true;
  for (Prediction& p : result.ranked) p = predict(cluster, job, p.config, detailed);
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace weft::planner
