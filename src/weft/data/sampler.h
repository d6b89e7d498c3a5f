#pragma once
// Which tokens each training step reads: the stream of a TokenDataset cut into windows of T+1
// tokens (window i starts at token i*T; its first T tokens are the inputs, its last T the targets),
// the last windows held out for validation, the rest visited in a seeded random order that is
// redrawn every epoch.
//
// Everything is a pure function of (seed, epoch, position): the order is a keyed bijection of
// the window indices (a Feistel network over Philox, cycle-walked into range), so no permutation is
// stored, any position can be computed on its own, and the sampler's whole state is the pair
// (epoch, position) a checkpoint records. Resuming from that pair reads exactly the batches an
// uninterrupted run would have read.
//
// A step consumes one global batch of G = micro_batch x microbatches x dp_size sequences at
// positions [position, position + G) of the epoch's order. Data-parallel rank r takes, for each
// microbatch j, the micro_batch sequences starting at position + (j*dp_size + r)*micro_batch, so
// the dp ranks together read exactly the serial run's global batch. An epoch ends when fewer than
// G windows are left (those are skipped, as every batch then has the same size).

#include <cstdint>

#include "weft/core/status.h"
#include "weft/data/token_dataset.h"

namespace weft::data {

struct SamplerConfig {
  int seq_len = 0;       // T
  int micro_batch = 0;   // sequences per microbatch on one dp rank
  int microbatches = 1;  // per step (gradient accumulation)
  double val_fraction = 0;
  uint64_t seed = 0;
  int dp_rank = 0, dp_size = 1;

  int64_t global_batch() const { return int64_t{micro_batch} * microbatches * dp_size; }
};

struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // sequences of this epoch's order already consumed (by all dp ranks)
  bool operator==(const SamplerState&) const = default;
};

// How a stream of num_tokens splits into windows. The validation windows are the last
// round(windows * val_fraction) (at least one when val_fraction > 0).
struct WindowSplit {
  int64_t windows = 0, train = 0, val = 0;
};
WindowSplit split_windows(int64_t num_tokens, int seq_len, double val_fraction);

// The train window visited at `position` of epoch `epoch`: a bijection of [0, n) for each
// (seed, epoch), computed without state.
int64_t shuffled_window(uint64_t seed, int64_t epoch, int64_t position, int64_t n);

class Sampler {
 public:
  // Fails (naming the dataset) when the train split is smaller than one global batch.
  static Result<Sampler> create(const TokenDataset& data, const SamplerConfig& cfg);

  const SamplerConfig& config() const { return cfg_; }
  const WindowSplit& split() const { return split_; }
  int64_t steps_per_epoch() const { return split_.train / cfg_.global_batch(); }
  // Validation batches of micro_batch sequences each dp rank can read (they never repeat).
  int64_t val_batches() const { return split_.val / (int64_t{cfg_.micro_batch} * cfg_.dp_size); }

  const SamplerState& state() const { return state_; }
  // Restores a checkpointed state; an error when it lies outside this dataset's epochs.
  Status set_state(const SamplerState& s);

  // The window index of sequence `i` of microbatch `j` this dp rank reads at the current state.
  int64_t train_window(int microbatch, int i) const;
  // Fills this rank's part of the next step: `microbatches` consecutive [micro_batch, T] blocks of
  // inputs and of targets; then advances the state by one global batch.
  void next_batch(int32_t* tokens, int32_t* targets);
  // Validation batch k (k < val_batches()) of this dp rank: [micro_batch, T] inputs and targets.
  // It is batch k * dp_size + dp_rank of one process's sequence of validation batches.
  void val_batch(int64_t k, int32_t* tokens, int32_t* targets) const;
  // Of one process's first `total` validation batches, how many are this dp rank's (batches k =
  // 0, 1, ... of val_batch): the replicas evaluate the same batches as one process, each once.
  int val_batches_of_replica(int total) const {
    return total > cfg_.dp_rank ? (total - cfg_.dp_rank + cfg_.dp_size - 1) / cfg_.dp_size : 0;
  }

 private:
  Sampler(const TokenDataset& data, const SamplerConfig& cfg, WindowSplit split)
      : data_(&data), cfg_(cfg), split_(split) {}
  void read_window(int64_t window, int32_t* tokens, int32_t* targets) const;

  const TokenDataset* data_;
  SamplerConfig cfg_;
  WindowSplit split_;
  SamplerState state_;
};

}  // namespace weft::data
