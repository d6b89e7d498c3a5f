#pragma once
// Picking the next token from a row of logits (`weft generate`): temperature scaling, top-k
// truncation, and a draw from the resulting distribution with a uniform number the caller supplies
// (from the counter-based RNG, so a seed reproduces a sample).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace weft::runtime {

// logits: V values. temperature <= 0 picks the most likely token (greedy). top_k > 0 keeps only
// the k largest logits. u in [0, 1).
inline int32_t sample_token(const float* logits, int V, double temperature, int top_k, double u) {
  const auto best = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  if (temperature <= 0) return best;
  // The k-th largest logit is the cut: ties at the cut are all kept (they are equally likely).
  double cut = -INFINITY;
  if (top_k > 0 && top_k < V) {
    std::vector<float> sorted(logits, logits + V);
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                     std::greater<float>());
    cut = sorted[top_k - 1];
  }
  std::vector<double> p(V, 0.0);
  double sum = 0;
  for (int i = 0; i < V; ++i) {
    if (logits[i] < cut) continue;
    p[i] = std::exp((static_cast<double>(logits[i]) - logits[best]) / temperature);
    sum += p[i];
  }
  double acc = 0;
  const double target = u * sum;
  for (int i = 0; i < V; ++i) {
    acc += p[i];
    if (p[i] > 0 && target < acc) return i;
  }
  return best;  // u rounding at the top end
}

}  // namespace weft::runtime
