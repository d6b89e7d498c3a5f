// The serial training loop on a tiny model: 10 steps + resume + 10 steps equals 20 steps bit for
// bit (every loss, gradient norm, validation loss, and the final parameters and AdamW moments);
// SIGINT, SIGTERM and SIGUSR1 finish the step and leave a checkpoint; a fresh run does not
// overwrite an earlier run's checkpoints; a corrupt checkpoint stops a resume before anything is
// written; the metrics file has every field.

#include "weft/runtime/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "weft/checkpoint/checkpoint.h"
#include "weft/core/stop_signals.h"

namespace weft::runtime {
namespace {
namespace fs = std::filesystem;

// As weft's main() does, before any thread exists: SIGINT goes to the waiting thread.
const bool kSignalsRouted = (route_stop_signals(), true);

// The training state a run ended with (the serial layout: one chunk, whole buffers): parameters,
// AdamW's m and v, read where the engine holds them.
std::array<std::vector<float>, 3> state_of(const Trainer& t) {
  RankState& st = *t.engine()->checkpoint_job().state;
  const int64_t n = st.place(0).layout->buffer.total();
  std::array<std::vector<float>, 3> out;
  for (int g = 0; g < 3; ++g) {
    out[g].resize(static_cast<size_t>(n));
    st.read(0, g, 0, n, out[g].data());
  }
  return out;
}

// A learnable stream: a few interleaved arithmetic patterns over the tiny model's 61 tokens.
class PatternDataset final : public data::TokenDataset {
 public:
  explicit PatternDataset(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      tokens_.push_back(static_cast<int32_t>((i * 7 + (i / 16) * 3) % 61));
    }
  }
  int64_t num_tokens() const override { return static_cast<int64_t>(tokens_.size()); }
  int64_t num_documents() const override { return 1; }
  void read(int64_t offset, int64_t n, int32_t* out) const override {
    std::memcpy(out, tokens_.data() + offset, n * sizeof(int32_t));
  }
  std::optional<int> vocab_size() const override { return 61; }
  std::string tokenizer() const override { return ""; }
  std::string describe() const override { return "pattern stream"; }

 private:
  std::vector<int32_t> tokens_;
};

const char* kRun = R"(
[model]
name = "tiny"
n_layer = 2
n_embd = 32
n_head = 4
vocab_size = 61
pad_vocab_to = 16
max_seq_len = 16

[data]
train = "pattern"
val_fraction = 0.2
tokenizer = "none"

[train]
seq_len = 16
micro_batch = 2
global_batch = 4
steps = 20
lr = 1e-2
min_lr = 1e-3
warmup_steps = 3
eval_every = 5
eval_batches = 2
save_every = 5
keep_last = 0
seed = 11
threads = 2
log_every = 5
)";

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = (fs::temp_directory_path() /
             ("weft_trainer_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(base_);
  }
  void TearDown() override { fs::remove_all(base_); }

  config::RunConfig config(const std::string& out, std::vector<std::string> sets = {}) {
    sets.push_back("run.out_dir=" + base_ + "/" + out);
    return config::parse_run_config(kRun, "tiny-run.toml", sets).value_or_throw("config");
  }
  // The lines of a run's metrics.jsonl, parsed.
  std::vector<nlohmann::json> metrics(const std::string& out) const {
    std::ifstream f(base_ + "/" + out + "/metrics.jsonl");
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(f, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }
  static TrainerOptions quiet(TrainerOptions o = {}) {
    o.progress = false;
    o.measure_gemm_ceiling = false;
    return o;
  }

  PatternDataset data_{16 * 50 + 1};  // 50 windows: 40 train (10 steps an epoch), 10 validation
  std::string base_;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST_F(TrainerTest, TenStepsResumedForTenMoreEqualTwentyStepsBitForBit) {
  Trainer whole(config("whole"), data_, quiet());
  const TrainResult w = whole.run().value_or_throw("whole");
  ASSERT_EQ(w.records.size(), 20u);

  TrainerOptions first_half = quiet();
  first_half.stop_after = 10;
  Trainer a(config("split"), data_, first_half);
  const TrainResult ra = a.run().value_or_throw("first half");
  ASSERT_EQ(ra.last_step, 10);
  EXPECT_FALSE(ra.stopped);
  EXPECT_EQ(ra.checkpoint, base_ + "/split/checkpoints/step_00000010");

  TrainerOptions second_half = quiet();
  second_half.resume = "auto";
  Trainer b(config("split"), data_, second_half);
  const TrainResult rb = b.run().value_or_throw("second half");
  EXPECT_EQ(rb.first_step, 10);
  EXPECT_EQ(rb.resumed_from, ra.checkpoint);
  ASSERT_EQ(rb.records.size(), 10u);

  std::vector<StepRecord> split = ra.records;
  split.insert(split.end(), rb.records.begin(), rb.records.end());
  for (size_t i = 0; i < 20; ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_EQ(split[i].step, w.records[i].step);
    EXPECT_TRUE(same_bits(split[i].loss, w.records[i].loss))
        << split[i].loss << " vs " << w.records[i].loss;
    EXPECT_EQ(split[i].grad_norm, w.records[i].grad_norm);
    EXPECT_EQ(split[i].lr, w.records[i].lr);
    EXPECT_EQ(split[i].epoch, w.records[i].epoch);
    ASSERT_EQ(split[i].val_loss.has_value(), w.records[i].val_loss.has_value());
    if (split[i].val_loss) {
      EXPECT_TRUE(same_bits(*split[i].val_loss, *w.records[i].val_loss));
    }
  }
  const auto bs = state_of(b), ws = state_of(whole);
  for (int g = 0; g < 3; ++g) EXPECT_TRUE(same_bits(bs[g], ws[g])) << "state group " << g;
  EXPECT_EQ(b.engine()->checkpoint_job().state->step_count(), 20);
  // It learned something, and the run crossed an epoch boundary on the way.
  EXPECT_LT(w.records.back().loss, w.records.front().loss - 0.5f);
  EXPECT_EQ(w.records.back().epoch, 1);
  // The split run's metrics file reads like the whole run's: steps 1..20, once each.
  std::ifstream f(base_ + "/split/metrics.jsonl");
  std::string line;
  int64_t expect_step = 1;
  while (std::getline(f, line)) {
    EXPECT_EQ(nlohmann::json::parse(line)["step"].get<int64_t>(), expect_step++);
  }
  EXPECT_EQ(expect_step, 21);
}

// A save in the background writes what a save in the foreground does, byte for byte: the
// snapshot is the state of the step it was taken at (not of the steps trained while it drains),
// and so is the optimizer step recorded with it.
TEST_F(TrainerTest, BackgroundSavesWriteTheCheckpointsForegroundSavesWrite) {
  const std::vector<std::string> saves = {"train.save_every=3", "train.keep_last=0",
                                          "train.steps=10"};
  std::vector<std::string> sync = saves, async = saves;
  sync.push_back("train.async_checkpoint=false");
  async.push_back("train.async_checkpoint=true");
  Trainer foreground(config("sync", sync), data_, quiet());
  const TrainResult f = foreground.run().value_or_throw("foreground saves");
  Trainer background(config("async", async), data_, quiet());
  const TrainResult b = background.run().value_or_throw("background saves");
  EXPECT_EQ(b.checkpoint, base_ + "/async/checkpoints/step_00000010");
  for (const int step : {3, 6, 9, 10}) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::string name = checkpoint::step_dir_name(step);
    const auto mf = checkpoint::read_metadata(base_ + "/sync/checkpoints/" + name);
    const auto mb = checkpoint::read_metadata(base_ + "/async/checkpoints/" + name);
    ASSERT_TRUE(mf.ok() && mb.ok()) << mf.status().message() << mb.status().message();
    EXPECT_EQ(mb.value().optimizer_step, mf.value().optimizer_step);
    EXPECT_EQ(mb.value().train.sampler_position, mf.value().train.sampler_position);
    ASSERT_EQ(mb.value().shards.size(), mf.value().shards.size());
    for (size_t i = 0; i < mf.value().shards.size(); ++i) {
      EXPECT_EQ(mb.value().shards[i].file, mf.value().shards[i].file);
      EXPECT_EQ(mb.value().shards[i].xxh3, mf.value().shards[i].xxh3) << mf.value().shards[i].file;
    }
  }
  // The background saves' records say what they held training for.
  int saves_logged = 0;
  for (const nlohmann::json& line : metrics("async"))
    saves_logged += line.contains("checkpoint_ms");
  EXPECT_GE(saves_logged, 3);
}

// A stop signal to this process, as ^C or mpirun sends it; returns once `signals` heard it.
void raise_stop(int sig, const StopSignalListener& signals) {
  kill(getpid(), sig);  // to the process: the signal thread takes it
  while (!signals.heard()) std::this_thread::yield();
}

TEST_F(TrainerTest, SigintFinishesTheStepSavesACheckpointAndTheRunResumesFromIt) {
  ASSERT_TRUE(kSignalsRouted);
  {
    TrainerOptions o = quiet();
    const StopSignalListener signals;  // as the command holds it
    o.signals = &signals;
    o.on_step = [&signals](const StepRecord& r) {
      if (r.step == 3) raise_stop(SIGINT, signals);
    };
    const TrainResult r = Trainer(config("sigint"), data_, o).run().value_or_throw("run");
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.stop_signal, SIGINT);
    EXPECT_EQ(r.last_step, 3);
    const std::string root = base_ + "/sigint/checkpoints";
    EXPECT_EQ(r.checkpoint, root + "/step_00000003");
    EXPECT_EQ(checkpoint::find_latest(root).value().value(), r.checkpoint);
    EXPECT_TRUE(fs::exists(base_ + "/sigint/loss.svg"));
  }
  // A resume starts at step 3; a stop signalled before its first step saves nothing new.
  TrainerOptions o = quiet();
  o.resume = "auto";
  const StopSignalListener signals;
  o.signals = &signals;
  raise_stop(SIGTERM, signals);
  const TrainResult r = Trainer(config("sigint"), data_, o).run().value_or_throw("resume");
  EXPECT_EQ(r.stop_signal, SIGTERM);
  EXPECT_EQ(r.first_step, 3);
  EXPECT_EQ(r.last_step, 3);
  EXPECT_TRUE(r.records.empty());
}

// SIGUSR1: what mpirun forwards to its ranks when Slurm's time limit nears (docs/slurm.md).
TEST_F(TrainerTest, SigusrFromTheStepCallbackStopsWithACheckpoint) {
  ASSERT_TRUE(kSignalsRouted);
  TrainerOptions o = quiet();
  const StopSignalListener signals;
  o.signals = &signals;
  o.on_step = [&signals](const StepRecord& r) {
    if (r.step == 2) raise_stop(SIGUSR1, signals);
  };
  const TrainResult r = Trainer(config("usr1"), data_, o).run().value_or_throw("run");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_signal, SIGUSR1);
  EXPECT_EQ(r.last_step, 2);
  EXPECT_TRUE(fs::exists(base_ + "/usr1/checkpoints/step_00000002/metadata.json"));
}

TEST_F(TrainerTest, AFreshRunRefusesAnOutDirHoldingCheckpoints) {
  TrainerOptions o = quiet();
  o.stop_after = 2;
  Trainer(config("taken"), data_, o).run().value_or_throw("first");
  const std::string metrics = read_text(base_ + "/taken/metrics.jsonl");
  auto r = Trainer(config("taken"), data_, quiet()).run();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("already holds checkpoints"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("--resume"), std::string::npos);
  EXPECT_EQ(read_text(base_ + "/taken/metrics.jsonl"), metrics);
}

TEST_F(TrainerTest, ACorruptCheckpointStopsTheResumeBeforeAnythingIsWritten) {
  TrainerOptions o = quiet();
  o.stop_after = 5;
  Trainer(config("corrupt"), data_, o).run().value_or_throw("first");
  const std::string shard = base_ + "/corrupt/checkpoints/step_00000005/model-tp0-pp0.bin";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64);
    f.put('\x7f');
  }
  const std::string metrics = read_text(base_ + "/corrupt/metrics.jsonl");
  TrainerOptions resume = quiet();
  resume.resume = "auto";
  auto r = Trainer(config("corrupt"), data_, resume).run();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(shard), std::string::npos) << r.status().message();
  EXPECT_EQ(read_text(base_ + "/corrupt/metrics.jsonl"), metrics);
  EXPECT_EQ(read_text(base_ + "/corrupt/checkpoints/latest"), "step_00000005\n");
  // A checkpoint of another model is refused the same way, naming its metadata.
  TrainerOptions other = quiet();
  other.resume = base_ + "/corrupt/checkpoints";
  auto r2 = Trainer(config("other", {"model.n_layer=1"}), data_, other).run();
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("metadata.json: the checkpoint holds another model"),
            std::string::npos)
      << r2.status().message();
  EXPECT_FALSE(fs::exists(base_ + "/other/metrics.jsonl"));
}

TEST_F(TrainerTest, TooManyNonFiniteStepsInARowStopTheRunWithAnError) {
  Trainer t(config("nan-stop", {"train.lr=1e30", "train.min_lr=1e30", "train.warmup_steps=0",
                                "train.clip=0", "train.steps=20", "train.eval_every=0",
                                "train.max_skipped_steps=3", "train.save_every=0"}),
            data_, quiet());
  const auto r = t.run();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("3 consecutive steps (through step 4) had a non-finite loss "
                                      "or gradient norm"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(t.engine()->checkpoint_job().state->step_count(), 1);
}

TEST_F(TrainerTest, NonFiniteStepsAreSkippedAndLoggedAndTheRunGoesOn) {
  // A learning rate of 1e30 without clipping sends the weights to infinity after one update; the
  // loss is NaN from then on, and those steps make no update.
  Trainer t(config("nan", {"train.lr=1e30", "train.min_lr=1e30", "train.warmup_steps=0",
                           "train.clip=0", "train.steps=4", "train.eval_every=0"}),
            data_, quiet());
  const TrainResult r = t.run().value_or_throw("run");
  ASSERT_EQ(r.records.size(), 4u);
  EXPECT_FALSE(r.records[0].skipped);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_TRUE(r.records[i].skipped) << i;
    EXPECT_FALSE(std::isfinite(r.records[i].loss)) << i;
  }
  EXPECT_EQ(t.engine()->checkpoint_job().state->step_count(), 1);
  std::ifstream f(base_ + "/nan/metrics.jsonl");
  std::string line;
  std::getline(f, line);
  std::getline(f, line);
  const auto j = nlohmann::json::parse(line);
  EXPECT_TRUE(j["loss"].is_null());
  EXPECT_EQ(j["skipped"], true);
}

TEST_F(TrainerTest, MetricsLinesCarryEveryFieldAndTheRunEndsWithALossPlot) {
  TrainerOptions o = quiet();
  o.measure_gemm_ceiling = true;
  // A peak of 1 PFLOP/s: above any ceiling measured here, so MFU against it is reported.
  Trainer t(config("metrics", {"train.steps=6", "train.peak_gflops=1e6", "train.eval_every=3"}),
            data_, o);
  t.run().value_or_throw("run");
  std::ifstream f(base_ + "/metrics/metrics.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    ++n;
    EXPECT_EQ(j["step"], n);
    for (const char* key : {"loss", "lr", "grad_norm", "step_ms", "tokens_per_s", "mfu_spec",
                            "mfu_gemm", "peak_mem_mib", "skipped", "epoch", "tokens"}) {
      EXPECT_TRUE(j.contains(key)) << key << " missing in " << line;
    }
    EXPECT_EQ(j.contains("val_loss"), n % 3 == 0) << line;
    EXPECT_EQ(j["tokens"], n * 4 * 16);
    EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
    EXPECT_GT(j["mfu_gemm"].get<double>(), 0);
    EXPECT_GT(j["peak_mem_mib"].get<double>(), 0);
  }
  EXPECT_EQ(n, 6);
  const std::string svg = read_text(base_ + "/metrics/loss.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("validation loss"), std::string::npos);
}

TEST_F(TrainerTest, ASpecPeakBelowTheMeasuredGemmCeilingIsNotReported) {
  // 1 MFLOP/s cannot be a peak of a machine that just ran a GEMM faster: an MFU against it would
  // read far above 100%. The demo's config once gave a base clock's peak and printed MFU 105%.
  TrainerOptions o = quiet();
  o.measure_gemm_ceiling = true;
  Trainer t(config("low-peak", {"train.steps=2", "train.peak_gflops=0.001"}), data_, o);
  t.run().value_or_throw("run");
  const std::vector<nlohmann::json> lines = metrics("low-peak");
  EXPECT_EQ(lines.size(), 2u);
  for (const auto& j : lines) {
    EXPECT_FALSE(j.contains("mfu_spec")) << j;
    EXPECT_GT(j["mfu_gemm"].get<double>(), 0) << j;
  }
}

TEST_F(TrainerTest, AStepFasterThanTheGemmCeilingMeasuresTheCeilingAgain) {
  // The first ceiling measured while something else held the cores (1 kFLOP/s here; the demo's
  // read half the later ones): the first step beats it, and the ceiling is measured again.
  TrainerOptions o = quiet();
  o.measure_gemm_ceiling = true;
  int fresh = 0;
  o.gemm_ceiling = [&](bool again) {
    fresh += again ? 1 : 0;
    return again ? 1e18 : 1e3;
  };
  Trainer t(config("remeasured", {"train.steps=3", "train.log_every=1", "train.eval_every=0"}),
            data_, o);
  t.run().value_or_throw("run");
  const std::vector<nlohmann::json> lines = metrics("remeasured");
  EXPECT_EQ(lines.size(), 3u);
  for (const auto& j : lines) EXPECT_LT(j["mfu_gemm"].get<double>(), 1.0) << j;
  EXPECT_EQ(fresh, 1);  // once: the steps after it are below the new ceiling
}

}  // namespace
}  // namespace weft::runtime
