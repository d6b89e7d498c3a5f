#include "weft/data/token_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {
// A TokenDataset over an in-memory vector.
class VectorDataset : public weft::data::TokenDataset {
 public:
  explicit VectorDataset(std::vector<int32_t> t) : t_(std::move(t)) {}
  int64_t num_tokens() const override { return static_cast<int64_t>(t_.size()); }
  int64_t num_documents() const override { return 1; }
  void read(int64_t offset, int64_t n, int32_t* out) const override {
    std::copy(t_.begin() + offset, t_.begin() + offset + n, out);
  }
  std::optional<int> vocab_size() const override { return std::nullopt; }
  std::string tokenizer() const override { return ""; }
  std::string describe() const override { return "vector"; }

 private:
  std::vector<int32_t> t_;
};
}  // namespace

TEST(UnigramEntropy, IsLogKForKEquallyFrequentTokens) {
  VectorDataset d({0, 1, 2, 3, 0, 1, 2, 3});
  EXPECT_NEAR(weft::data::unigram_entropy(d, 0, 8), std::log(4.0), 1e-12);
}

TEST(UnigramEntropy, IsZeroForOneRepeatedTokenAndCountsOnlyTheRange) {
  VectorDataset d({7, 7, 7, 1, 2});
  EXPECT_EQ(weft::data::unigram_entropy(d, 0, 3), 0.0);
  // p = (2/3, 1/3) over [1, 4): 7, 7, 1
  const double h = -(2.0 / 3) * std::log(2.0 / 3) - (1.0 / 3) * std::log(1.0 / 3);
  EXPECT_NEAR(weft::data::unigram_entropy(d, 1, 4), h, 1e-12);
}
