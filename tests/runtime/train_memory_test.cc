// Every rank's peak memory in a 4-rank `weft train`, as weft prints it ("peak memory per rank,
// measured (resident above the start) / predicted"), within 10% of model::estimate_rank_memory,
// rank 0 included (issue #16), for the terms beyond the model's tensors:
//   - tiny (28k parameters): the process's runtime (oneDNN's JIT kernels, the code pages a step
//     touches: model::kDefaultRuntimeBytes) is nearly all of it;
//   - an 8,192-token vocabulary on C=256, under dp=4 and tp=2 x dp=2: rank 0 alone measures the
//     GEMM ceiling, whose operands (the LM head's [8192, 256] twice, 17 MiB) are not training's
//     memory and must not be counted.
// oneDNN's packing buffers (none at 32 tokens) are checked in tests/model/memory_runtime_test.cc.

#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "support/cli_fixture.h"

namespace weft {
namespace {

using test::weft_command;

struct RankMemory {
  std::string rank;
  double measured = 0, predicted = 0;  // MiB
};

// "tp0-dp1-pp0 8.4 / 8.4 MiB (100%)" for every rank on the "peak memory per rank" line.
std::vector<RankMemory> rank_memory(const std::string& text) {
  std::vector<RankMemory> out;
  const size_t at = text.find("peak memory per rank");
  if (at == std::string::npos) return out;
  const std::string line = text.substr(at, text.find('\n', at) - at);
  const std::regex one(R"((tp\d+-dp\d+-pp\d+) ([0-9.]+) / ([0-9.]+) MiB)");
  for (auto it = std::sregex_iterator(line.begin(), line.end(), one); it != std::sregex_iterator();
       ++it) {
    out.push_back({(*it)[1], std::stod((*it)[2]), std::stod((*it)[3])});
  }
  return out;
}

class TrainMemoryTest : public test::CliFixture {
 protected:
  void expect_within_10_percent(const std::string& model, const std::string& layout) {
    const std::string run = dir_ + "/run.toml";
    std::ofstream(run) << "[model]\n"
                       << model << "[data]\ntrain = \"" << dir_
                       << "/syn.bin\"\nval_fraction = 0.2\ntokenizer = \"none\"\n"
                       << "[train]\nseq_len = 16\nmicro_batch = 2\nglobal_batch = 8\nsteps = 6\n"
                       << "lr = 1e-3\neval_every = 3\neval_batches = 2\nsave_every = 0\n"
                       << "threads = 1\n[run]\nout_dir = \"" << dir_ << "/out\"\n";
    const auto r = weft_command(WEFT_MPIRUN " -n 4 " WEFT_BIN " train " + run + " " + layout);
    ASSERT_EQ(r.rc, 0) << r.text;
    const std::vector<RankMemory> ranks = rank_memory(r.text);
    ASSERT_EQ(ranks.size(), 4u) << r.text;
    for (const RankMemory& m : ranks) {
      // Measured 0.95-1.02 on every rank of the three runs (2026-12-01); the model without its
      // runtime term gave 0.09 of tiny's measurement, without oneDNN's packing buffers 0.80 of
      // the large vocabulary's, and rank 0 counting its GEMM ceiling measured 1.3-1.4.
      const double ratio = m.measured / m.predicted;
      std::fprintf(stderr, "weft-memory: %s %.1f / %.1f MiB (%.3f)\n", m.rank.c_str(), m.measured,
                   m.predicted, ratio);
      EXPECT_GE(ratio, 0.90) << m.rank << ": " << m.measured << " / " << m.predicted << " MiB\n"
                             << r.text;
      EXPECT_LE(ratio, 1.10) << m.rank << ": " << m.measured << " / " << m.predicted << " MiB\n"
                             << r.text;
    }
  }
};

TEST_F(TrainMemoryTest, TinyModelEveryRankWithin10Percent) {
  expect_within_10_percent("config = \"" WEFT_SOURCE_DIR "/configs/models/tiny.toml\"\n",
                           "--set parallel.dp=4");
}

constexpr const char* kLargeVocab =
    "name = \"vocab-8k\"\nn_layer = 2\nn_embd = 256\nn_head = 4\nvocab_size = 8192\n"
    "max_seq_len = 16\n";

TEST_F(TrainMemoryTest, LargeVocabularyEveryRankWithin10Percent) {
  expect_within_10_percent(kLargeVocab, "--set parallel.dp=4");
}

TEST_F(TrainMemoryTest, TensorAndDataParallelEveryRankWithin10Percent) {
  expect_within_10_percent(kLargeVocab, "--set parallel.tp=2 --set parallel.dp=2");
}

// Background saves (train.async_checkpoint, every 2 steps): dp rank 0 keeps a copy of its state
// from the first save on (parameters, m and v: 42 MiB; measured 122.8 / 118.8 MiB, against
// 83.8 / 79.3 without the saves), the other ZeRO-0 replicas write nothing and keep none (80.3 /
// 76.7). Counting the copy on every rank, or on none, puts a rank 50% off. With the shard writer's
// 16 MiB stage in use for every byte (before the snapshot was laid out as the files) rank 0
// measured 138.1 / 118.8.
TEST_F(TrainMemoryTest, BackgroundSavesSnapshotCountedOnTheRanksThatWrite) {
  expect_within_10_percent(kLargeVocab, "--set parallel.dp=4 --set train.save_every=2");
}

}  // namespace
}  // namespace weft
