// The sampler against an in-memory stream whose token i is i, so every read names its window.

#include "weft/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

namespace weft::data {
namespace {

class CountingDataset final : public TokenDataset {
 public:
  explicit CountingDataset(int64_t n) : n_(n) {}
  int64_t num_tokens() const override { return n_; }
  int64_t num_documents() const override { return 1; }
  void read(int64_t offset, int64_t n, int32_t* out) const override {
    ASSERT_LE(offset + n, n_);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(offset + i);
  }
  std::optional<int> vocab_size() const override { return std::nullopt; }
  std::string tokenizer() const override { return ""; }
  std::string describe() const override { return "counting stream"; }

 private:
  int64_t n_;
};

SamplerConfig config(int T, int b, int m, double val = 0.2, uint64_t seed = 7) {
  SamplerConfig c;
  c.seq_len = T;
  c.micro_batch = b;
  c.microbatches = m;
  c.val_fraction = val;
  c.seed = seed;
  return c;
}

// The windows of one step, read back from the token values (window = first token / T).
std::vector<int64_t> step_windows(Sampler& s) {
  const auto& c = s.config();
  const int64_t rows = int64_t{c.micro_batch} * c.microbatches;
  std::vector<int32_t> x(rows * c.seq_len), y(x.size());
  s.next_batch(x.data(), y.data());
  std::vector<int64_t> w;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* row = x.data() + r * c.seq_len;
    for (int t = 0; t < c.seq_len; ++t) {
      EXPECT_EQ(row[t], row[0] + t);
      EXPECT_EQ(y[r * c.seq_len + t], row[t] + 1);  // targets are the inputs shifted by one
    }
    EXPECT_EQ(row[0] % c.seq_len, 0);
    w.push_back(row[0] / c.seq_len);
  }
  return w;
}

TEST(SplitWindows, CutsTheStreamIntoWindowsOfTPlusOneTokensAndHoldsOutTheLast) {
  auto s = split_windows(101, 10, 0.2);  // windows 0..9: the last reads tokens 90..100
  EXPECT_EQ(s.windows, 10);
  EXPECT_EQ(s.val, 2);
  EXPECT_EQ(s.train, 8);
  EXPECT_EQ(split_windows(100, 10, 0.2).windows, 9);  // 91..100 would need token 100
  EXPECT_EQ(split_windows(101, 10, 0.001).val, 1);    // a fraction > 0 gives at least one
  EXPECT_EQ(split_windows(101, 10, 0).val, 0);
  EXPECT_EQ(split_windows(5, 10, 0.2).windows, 0);
}

TEST(ShuffledWindow, IsAPermutationForEverySizeAndDependsOnSeedAndEpoch) {
  for (int64_t n : {1, 2, 3, 7, 64, 100, 1000, 4097}) {
    std::vector<int64_t> order;
    for (int64_t i = 0; i < n; ++i) order.push_back(shuffled_window(3, 0, i, n));
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "n=" << n;
    if (n >= 64) {
      std::vector<int64_t> other_epoch, other_seed;
      for (int64_t i = 0; i < n; ++i) {
        other_epoch.push_back(shuffled_window(3, 1, i, n));
        other_seed.push_back(shuffled_window(4, 0, i, n));
      }
      EXPECT_NE(order, other_epoch);
      EXPECT_NE(order, other_seed);
      EXPECT_NE(order, sorted);  // shuffled at all
    }
  }
  EXPECT_EQ(shuffled_window(3, 5, 17, 100), shuffled_window(3, 5, 17, 100));  // pure
}

TEST(Sampler, VisitsEveryTrainWindowOnceAnEpochAndNeverAValidationWindow) {
  CountingDataset ds(16 * 50 + 1);  // 50 windows of T=16: 40 train, 10 validation
  auto s = Sampler::create(ds, config(16, 2, 2)).value();
  EXPECT_EQ(s.split().train, 40);
  EXPECT_EQ(s.steps_per_epoch(), 10);
  std::multiset<int64_t> seen;
  for (int step = 0; step < 10; ++step) {
    EXPECT_EQ(s.state().epoch, 0);
    for (int64_t w : step_windows(s)) seen.insert(w);
  }
  EXPECT_EQ(seen.size(), 40u);
  for (int64_t w = 0; w < 40; ++w) EXPECT_EQ(seen.count(w), 1u) << w;
  EXPECT_EQ(s.state(), (SamplerState{1, 0}));
}

TEST(Sampler, DrawsANewOrderEachEpochAndSkipsAPartialLastBatch) {
  CountingDataset ds(16 * 50 + 1);
  auto s = Sampler::create(ds, config(16, 3, 1)).value();  // 40 train windows, batches of 3
  EXPECT_EQ(s.steps_per_epoch(), 13);                      // the 40th window waits an epoch
  std::vector<int64_t> e0, e1;
  for (int i = 0; i < 13; ++i) {
    for (int64_t w : step_windows(s)) e0.push_back(w);
  }
  EXPECT_EQ(s.state().epoch, 1);
  for (int i = 0; i < 13; ++i) {
    for (int64_t w : step_windows(s)) e1.push_back(w);
  }
  EXPECT_NE(e0, e1);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 39u);
}

TEST(Sampler, ResumedFromItsStateReadsWhatAnUninterruptedSamplerReads) {
  CountingDataset ds(16 * 50 + 1);
  auto a = Sampler::create(ds, config(16, 2, 2)).value();
  for (int i = 0; i < 13; ++i) step_windows(a);  // into the second epoch
  const SamplerState saved = a.state();
  auto b = Sampler::create(ds, config(16, 2, 2)).value();
  ASSERT_TRUE(b.set_state(saved).ok());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(step_windows(a), step_windows(b)) << i;
  EXPECT_FALSE(b.set_state({0, 39}).ok());  // a batch of 4 does not fit at 39 of 40
  EXPECT_FALSE(b.set_state({-1, 0}).ok());
}

TEST(Sampler, DataParallelRanksTogetherReadTheSerialGlobalBatch) {
  CountingDataset ds(16 * 100 + 1);
  auto serial = Sampler::create(ds, config(16, 2, 4)).value();  // G = 8
  std::vector<Sampler> ranks;
  for (int r = 0; r < 2; ++r) {
    SamplerConfig c = config(16, 2, 2);  // G = 2 x 2 x dp 2 = 8
    c.dp_rank = r;
    c.dp_size = 2;
    ranks.push_back(Sampler::create(ds, c).value());
  }
  for (int step = 0; step < 12; ++step) {
    const auto all = step_windows(serial);
    const auto r0 = step_windows(ranks[0]), r1 = step_windows(ranks[1]);
    // Serial microbatch 2j + r is rank r's microbatch j (micro_batch = 2 sequences).
    for (int j = 0; j < 2; ++j) {
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(r0[j * 2 + i], all[(2 * j + 0) * 2 + i]);
        EXPECT_EQ(r1[j * 2 + i], all[(2 * j + 1) * 2 + i]);
      }
    }
    EXPECT_EQ(ranks[0].state(), serial.state());
  }
}

TEST(Sampler, ValidationBatchesAreFixedWindowsOfTheHeldOutTail) {
  CountingDataset ds(16 * 50 + 1);
  auto s = Sampler::create(ds, config(16, 2, 2)).value();
  EXPECT_EQ(s.val_batches(), 5);
  std::vector<int32_t> x(32), y(32), x2(32), y2(32);
  std::set<int32_t> starts;
  for (int k = 0; k < 5; ++k) {
    s.val_batch(k, x.data(), y.data());
    step_windows(s);  // training in between changes nothing
    s.val_batch(k, x2.data(), y2.data());
    EXPECT_EQ(x, x2);
    for (int i = 0; i < 2; ++i) {
      EXPECT_GE(x[i * 16] / 16, 40);
      starts.insert(x[i * 16]);
      EXPECT_EQ(y[i * 16 + 15], x[i * 16 + 15] + 1);
    }
  }
  EXPECT_EQ(starts.size(), 10u);
}

TEST(Sampler, RefusesADatasetSmallerThanOneGlobalBatch) {
  CountingDataset ds(16 * 5 + 1);  // 5 windows, 4 for training
  auto s = Sampler::create(ds, config(16, 2, 4));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("counting stream"), std::string::npos);
  EXPECT_NE(s.status().message().find("fewer than one global batch of 8"), std::string::npos);
  EXPECT_FALSE(Sampler::create(ds, config(0, 2, 4)).ok());
}

}  // namespace
}  // namespace weft::data
