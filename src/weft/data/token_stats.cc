#include "weft/data/token_stats.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "weft/core/check.h"

namespace weft::data {

double unigram_entropy(const TokenDataset& data, int64_t begin, int64_t end) {
  WEFT_CHECK(0 <= begin && begin < end && end <= data.num_tokens(), "token range [", begin, ", ",
             end, ") is outside the dataset's ", data.num_tokens(), " tokens");
  std::vector<int64_t> counts;
  std::vector<int32_t> chunk(1 << 20);
  for (int64_t at = begin; at < end; at += static_cast<int64_t>(chunk.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), end - at);
    data.read(at, n, chunk.data());
    for (int64_t i = 0; i < n; ++i) {
      const auto id = static_cast<size_t>(chunk[i]);
      if (id >= counts.size()) counts.resize(id + 1, 0);
      ++counts[id];
    }
  }
  const double total = static_cast<double>(end - begin);
  double h = 0;
  for (int64_t c : counts) {
    if (c > 0) h -= (c / total) * std::log(c / total);
  }
  return h;
}

}  // namespace weft::data
