#include "weft/data/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "weft/core/rng.h"

namespace weft::data {

WindowSplit split_windows(int64_t num_tokens, int seq_len, double val_fraction) {
  WindowSplit s;
  if (seq_len <= 0 || num_tokens < seq_len + 1) return s;
  s.windows = (num_tokens - 1) / seq_len;
  if (val_fraction > 0) {
    s.val = std::clamp<int64_t>(std::llround(static_cast<double>(s.windows) * val_fraction), 1,
                                s.windows);
  }
  s.train = s.windows - s.val;
  return s;
}

int64_t shuffled_window(uint64_t seed, int64_t epoch, int64_t position, int64_t n) {
  if (n <= 1) return 0;
  // A balanced Feistel network permutes [0, 2^(2*half)); cycle-walking (re-applying it until the
  // value falls below n) turns that into a permutation of [0, n). The domain is < 4n, so a walk
  // takes fewer than 4 rounds on average.
  const int bits = std::bit_width(static_cast<uint64_t>(n - 1));  // 2^bits >= n
  const int half = (bits + 1) / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  const uint64_t key = stream_key(seed, "sampler.order");
  const auto e = static_cast<uint64_t>(epoch);
  auto permute = [&](uint64_t x) {
    uint64_t left = x >> half, right = x & mask;
    for (uint32_t round = 0; round < 6; ++round) {
      const auto f = philox4x32({static_cast<uint32_t>(right), round, static_cast<uint32_t>(e),
                                 static_cast<uint32_t>(e >> 32)},
                                key)[0];
      const uint64_t next = left ^ (f & mask);
      left = right;
      right = next;
    }
    return (left << half) | right;
  };
  uint64_t x = static_cast<uint64_t>(position);
  do {
    x = permute(x);
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

Result<Sampler> Sampler::create(const TokenDataset& data, const SamplerConfig& cfg) {
  Status s;
  if (cfg.seq_len <= 0) s.add(fmt::format("sequence length {} must be > 0", cfg.seq_len));
  if (cfg.micro_batch <= 0) s.add(fmt::format("micro batch {} must be > 0", cfg.micro_batch));
  if (cfg.microbatches <= 0) s.add(fmt::format("microbatches {} must be > 0", cfg.microbatches));
  if (cfg.dp_size <= 0 || cfg.dp_rank < 0 || cfg.dp_rank >= cfg.dp_size) {
    s.add(fmt::format("dp rank {} is not in [0, dp={})", cfg.dp_rank, cfg.dp_size));
  }
  if (!(cfg.val_fraction >= 0 && cfg.val_fraction < 1)) {
    s.add(fmt::format("validation fraction {} is not in [0, 1)", cfg.val_fraction));
  }
  if (!s.ok()) return s;
  const WindowSplit split = split_windows(data.num_tokens(), cfg.seq_len, cfg.val_fraction);
  if (split.train < cfg.global_batch()) {
    return Status::error(fmt::format(
        "{}: {} tokens make {} windows of seq_len+1={} tokens, {} of them for training: fewer "
        "than one global batch of {} sequences",
        data.describe(), data.num_tokens(), split.windows, cfg.seq_len + 1, split.train,
        cfg.global_batch()));
  }
  return Sampler(data, cfg, split);
}

Status Sampler::set_state(const SamplerState& s) {
  if (s.epoch < 0 || s.position < 0 || s.position + cfg_.global_batch() > split_.train) {
    return Status::error(fmt::format(
        "sampler position (epoch {}, position {}) does not fit this data ({} train windows, "
        "global batch {})",
        s.epoch, s.position, split_.train, cfg_.global_batch()));
  }
  state_ = s;
  return {};
}

int64_t Sampler::train_window(int microbatch, int i) const {
  const int64_t pos =
      state_.position + (int64_t{microbatch} * cfg_.dp_size + cfg_.dp_rank) * cfg_.micro_batch + i;
  return shuffled_window(cfg_.seed, state_.epoch, pos, split_.train);
}

void Sampler::read_window(int64_t window, int32_t* tokens, int32_t* targets) const {
  const int T = cfg_.seq_len;
  // One read of T+1 tokens; inputs and targets are the same window shifted by one.
  thread_local std::vector<int32_t> buf;
  buf.resize(static_cast<size_t>(T) + 1);
  data_->read(window * T, T + 1, buf.data());
  std::copy(buf.begin(), buf.begin() + T, tokens);
  std::copy(buf.begin() + 1, buf.end(), targets);
}

void Sampler::next_batch(int32_t* tokens, int32_t* targets) {
  const int64_t T = cfg_.seq_len;
  for (int j = 0; j < cfg_.microbatches; ++j) {
    for (int i = 0; i < cfg_.micro_batch; ++i) {
      const int64_t row = int64_t{j} * cfg_.micro_batch + i;
      read_window(train_window(j, i), tokens + row * T, targets + row * T);
    }
  }
  state_.position += cfg_.global_batch();
  if (state_.position + cfg_.global_batch() > split_.train) {
    ++state_.epoch;
    state_.position = 0;
  }
}

void Sampler::val_batch(int64_t k, int32_t* tokens, int32_t* targets) const {
  const int64_t T = cfg_.seq_len;
  for (int i = 0; i < cfg_.micro_batch; ++i) {
    const int64_t w = (k * cfg_.dp_size + cfg_.dp_rank) * cfg_.micro_batch + i;
    read_window(split_.train + w % split_.val, tokens + i * T, targets + i * T);
  }
}

}  // namespace weft::data
