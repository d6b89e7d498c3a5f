#include "weft/core/suggest.h"

#include <algorithm>
#include <numeric>

namespace weft {

int edit_distance(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diag = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates) {
  const auto distance = [&](const std::string& c) { return edit_distance(name, c); };
  const auto best = std::ranges::min_element(candidates, {}, distance);  // the first of the nearest
  const int limit = std::max<int>(2, static_cast<int>(name.size()) / 3);
  if (best == candidates.end() || distance(*best) > limit) return "";
  return " (did you mean '" + *best + "'?)";
}

}  // namespace weft
