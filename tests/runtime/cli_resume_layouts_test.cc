// Resuming a run, through the `weft` binary: a checkpoint saved under one layout (tp, pp, dp, vp,
// ZeRO stage, sequence parallelism, pipeline schedule) continues under another and the run gives
// the uninterrupted serial run's losses and gradient norms at every step, and its final
// parameters, each within a bound measured for that pair of layouts; under the same layout, bit
// for bit. The gradient norms and parameters are there because the losses alone are blind to
// some bugs: gradients summed over data-parallel replicas instead of averaged change the losses
// by less than 1e-5 (Adam normalizes the gradients' scale away) while the gradient norm doubles.
//
// The model is the tiny one with 4 layers, so that pp=4 (one layer a stage) and pp=2 with vp=2
// (the interleaved schedule, four stages) fit it. A global batch of 8 sequences of micro batches
// of 2 is 4 microbatches a step, 2 per replica at dp=2.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "support/cli_fixture.h"

namespace weft {
namespace {

using test::checkpoint_params;
using test::CheckpointParams;
using test::expect_checkpoint_params_close;
using test::expect_steps_close;
using test::losses;
using test::metric;
using test::ParamTolerance;
using test::read_text;
using test::weft_command;

// A parallel layout: the [parallel] keys of a run, and the ranks it takes.
struct Layout {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int vp = 1;
  int zero = 0;
  bool sp = false;  // sequence parallelism (with tp > 1)
  std::string schedule = "1f1b";

  int ranks() const { return tp * pp * dp; }
  // Every [parallel] key, as --set options.
  std::string flags() const {
    return fmt::format(
        " --set parallel.tp={} --set parallel.pp={} --set parallel.dp={} --set parallel.vp={} "
        "--set parallel.zero={} --set parallel.sequence_parallel={} --set parallel.schedule={}",
        tp, pp, dp, vp, zero, sp ? "true" : "false", schedule);
  }
  // What `weft train` says of it as it starts, when it takes several ranks (one rank can only be
  // the serial layout: tp*pp*dp must equal the world size).
  std::string banner() const {
    return fmt::format("tp={} pp={} dp={}{}, {} ranks", tp, pp, dp,
                       sp ? " (sequence parallel)" : "", ranks());
  }
  // A gtest-safe name: the keys that differ from a serial run, e.g. "tp2pp2" or "dp2zero2".
  std::string name() const {
    std::string n;
    if (tp > 1) n += fmt::format("tp{}", tp);
    if (sp) n += "sp";
    if (pp > 1) n += fmt::format("pp{}", pp);
    if (vp > 1) n += fmt::format("vp{}", vp);
    if (dp > 1) n += fmt::format("dp{}", dp);
    if (zero > 0) n += fmt::format("zero{}", zero);
    if (pp > 1 && schedule != "1f1b") {
      std::string s = schedule;
      std::erase(s, '-');
      n += s;
    }
    return n.empty() ? "serial" : n;
  }
};

// How far a resumed run may be from the serial one, relative: each bound about 10x the difference
// measured for the pair (written next to it).
struct Bounds {
  double loss = 0;        // every step's loss
  double grad_norm = 0;   // every step's gradient norm (before clipping)
  ParamTolerance params;  // the final parameters, whole and tensor by tensor (relative L2)
};

struct LayoutPair {
  Layout from;  // trains steps 1-4 and saves the checkpoint
  Layout to;    // resumes it for steps 5-8
  Bounds bounds;
  bool llama = false;  // the 4-layer model with every modern choice (tiny-llama4) instead
};

std::string pair_name(const ::testing::TestParamInfo<LayoutPair>& info) {
  return (info.param.llama ? "llama_" : "") + info.param.from.name() + "_to_" +
         info.param.to.name();
}

void PrintTo(const LayoutPair& p, std::ostream* os) {
  *os << p.from.name() << " -> " << p.to.name();
}

constexpr int kSteps = 8;
constexpr int kStopAt = 4;

class CliResumeLayoutsTest : public test::CliFixture {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    std::ofstream(dir_ + "/tiny4.toml") << "[model]\nname = \"tiny4\"\nn_layer = 4\nn_embd = 32\n"
                                        << "n_head = 4\nvocab_size = 61\npad_vocab_to = 16\n"
                                        << "max_seq_len = 16\n";
    // configs/models/tiny-llama.toml's choices, with 4 layers.
    std::ofstream(dir_ + "/tiny-llama4.toml")
        << "[model]\nname = \"tiny-llama4\"\nn_layer = 4\nn_embd = 32\nn_head = 8\n"
        << "n_kv_head = 4\nvocab_size = 61\npad_vocab_to = 16\nmax_seq_len = 16\n"
        << "position = \"rope\"\nrope_theta = 500.0\nnorm = \"rmsnorm\"\nmlp = \"swiglu\"\n"
        << "ffn_hidden_size = 48\ntie_embeddings = false\nbias = false\n";
    for (const char* model : {"tiny4", "tiny-llama4"}) {
      std::ofstream(dir_ + "/run-" + model + ".toml")
          << "[model]\nconfig = \"" << dir_ << "/" << model << ".toml\"\n"
          << "[data]\ntrain = \"" << dir_ << "/syn.bin\"\nval_fraction = 0.2\n"
          << "tokenizer = \"none\"\n"
          << "[train]\nseq_len = 16\nmicro_batch = 2\nglobal_batch = 8\n"
          << "steps = " << kSteps << "\nlr = 1e-2\neval_every = 0\n"
          << "save_every = " << kStopAt << "\nthreads = 1\n"
          << "[run]\nout_dir = \"" << dir_ << "/out\"\n";
    }
    use_model(false);
  }
  // The model the next runs train: tiny4, or tiny-llama4.
  void use_model(bool llama) {
    run_ = dir_ + (llama ? "/run-tiny-llama4.toml" : "/run-tiny4.toml");
  }

  // `weft train` of the run config under `layout` (through mpirun when it takes several ranks),
  // into DIR/NAME, with further options `args`.
  test::CommandOutput train(const Layout& layout, const std::string& name,
                            const std::string& args) {
    const std::string launcher =
        layout.ranks() == 1 ? std::string(WEFT_BIN " ")
                            : fmt::format(WEFT_MPIRUN " -n {} " WEFT_BIN " ", layout.ranks());
    return weft_command(launcher + "train " + run_ + " --set run.out_dir=" + dir_ + "/" + name +
                        layout.flags() + " " + args);
  }

  // Steps 1-4 under `from`, then --resume for steps 5-8 under `to`, into DIR/NAME; its
  // metrics.jsonl. Fails the test when a launch fails.
  std::string train_split(const Layout& from, const Layout& to, const std::string& name) {
    auto r = train(from, name, fmt::format("--stop-after {}", kStopAt));
    EXPECT_EQ(r.rc, 0) << r.text;
    if (from.ranks() > 1) {
      EXPECT_HAS(r.text, from.banner());
    }
    r = train(to, name, "--resume");
    EXPECT_EQ(r.rc, 0) << r.text;
    if (to.ranks() > 1) {
      EXPECT_HAS(r.text, to.banner());
    }
    EXPECT_HAS(r.text, fmt::format("resuming at step {}", kStopAt));
    return metrics(name);
  }

  std::string metrics(const std::string& name) const {
    return dir_ + "/" + name + "/metrics.jsonl";
  }

  // The final checkpoint of run DIR/NAME: it saves every kStopAt steps, so at kSteps too.
  std::string final_checkpoint(const std::string& name) const {
    return fmt::format("{}/{}/checkpoints/step_{:08d}", dir_, name, kSteps);
  }

  // The losses, gradient norms and final parameters of the uninterrupted serial run: trained once
  // per test program, by the first test to ask; empty when it failed.
  struct SerialRun {
    std::vector<double> loss;
    std::vector<double> grad_norm;
    CheckpointParams params;
  };
  const SerialRun& serial_run(bool llama = false) {
    static std::optional<SerialRun> cached[2];
    std::optional<SerialRun>& c = cached[llama];
    if (!c) {
      use_model(llama);
      const std::string name = llama ? "serial-llama" : "serial";
      auto r = train(Layout{}, name, "");
      EXPECT_EQ(r.rc, 0) << r.text;
      if (r.rc != 0) return kNone;
      c = SerialRun{losses(metrics(name)), metric(metrics(name), "grad_norm"),
                    checkpoint_params(final_checkpoint(name))};
    }
    return *c;
  }
  static inline const SerialRun kNone{};

  std::string run_;
};

// The same layout stopped and resumed is the uninterrupted run bit for bit: every loss and
// gradient norm of metrics.jsonl equal as doubles, and the final parameters equal, serially and
// at tp=2 dp=2 with ZeRO-1.
TEST_F(CliResumeLayoutsTest, TheSameLayoutResumesBitIdentically) {
  const SerialRun& serial = serial_run();
  ASSERT_EQ(serial.loss.size(), static_cast<size_t>(kSteps));
  std::string split = train_split(Layout{}, Layout{}, "serial-split");
  EXPECT_EQ(losses(split), serial.loss) << read_text(split);
  EXPECT_EQ(metric(split, "grad_norm"), serial.grad_norm);
  expect_checkpoint_params_close(checkpoint_params(final_checkpoint("serial-split")), serial.params,
                                 {.all = 0, .per_tensor = 0}, "serial, split");

  const Layout layout{.tp = 2, .dp = 2, .zero = 1};
  auto r = train(layout, "whole", "");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, layout.banner());
  split = train_split(layout, layout, "split");
  ASSERT_EQ(losses(metrics("whole")).size(), static_cast<size_t>(kSteps))
      << read_text(metrics("whole"));
  EXPECT_EQ(losses(split), losses(metrics("whole"))) << read_text(split);
  EXPECT_EQ(metric(split, "grad_norm"), metric(metrics("whole"), "grad_norm"));
  expect_checkpoint_params_close(checkpoint_params(final_checkpoint("split")),
                                 checkpoint_params(final_checkpoint("whole")),
                                 {.all = 0, .per_tensor = 0}, layout.name() + ", split");
}

class CliResumeAcrossLayoutsTest : public CliResumeLayoutsTest,
                                   public ::testing::WithParamInterface<LayoutPair> {};

// A checkpoint of layout FROM resumed under layout TO: all 8 losses and gradient norms, and the
// final parameters, within the pair's bounds of the uninterrupted serial run's.
TEST_P(CliResumeAcrossLayoutsTest, GivesTheSerialRun) {
  const SerialRun& serial = serial_run(GetParam().llama);
  use_model(GetParam().llama);
  ASSERT_EQ(serial.loss.size(), static_cast<size_t>(kSteps));
  const Bounds& b = GetParam().bounds;
  const std::string split = train_split(GetParam().from, GetParam().to, "split");
  ASSERT_EQ(losses(split).size(), serial.loss.size()) << read_text(split);
  expect_steps_close(losses(split), serial.loss, b.loss, "loss");
  expect_steps_close(metric(split, "grad_norm"), serial.grad_norm, b.grad_norm, "grad_norm");
  expect_checkpoint_params_close(checkpoint_params(final_checkpoint("split")), serial.params,
                                 b.params, "final parameters");
}

// Each pair's bounds are about 10x what it measured (in the comment: loss, grad_norm, all
// parameters, worst tensor; the worst tensor is h.3.attn.qkv.bias, whose norm is small, except
// where named). A measured 0 gets 1e-6, some ten float roundings.
INSTANTIATE_TEST_SUITE_P(
    Pairs, CliResumeAcrossLayoutsTest,
    ::testing::Values(
        // 1.9e-7, 5.1e-6, 5.5e-6, 7.0e-5
        LayoutPair{.from = {.tp = 2, .pp = 2},
                   .to = {.dp = 4, .zero = 3},
                   .bounds = {2e-6, 5e-5, {.all = 5e-5, .per_tensor = 7e-4}}},
        // 0, 3.2e-7, 5.6e-8, 2.3e-6
        LayoutPair{.from = {.dp = 2, .zero = 2},
                   .to = {.pp = 2, .vp = 2, .schedule = "interleaved"},
                   .bounds = {1e-6, 3e-6, {.all = 6e-7, .per_tensor = 2e-5}}},
        // 6.8e-8, 2.5e-7, 4.7e-8, 1.1e-6
        LayoutPair{.from = {.pp = 4},
                   .to = {.tp = 2, .dp = 2, .zero = 1, .sp = true},
                   .bounds = {1e-6, 3e-6, {.all = 5e-7, .per_tensor = 1e-5}}},
        // 1.3e-7, 3.3e-6, 3.3e-6, 3.8e-5
        LayoutPair{
            .from = {.tp = 4}, .to = {}, .bounds = {2e-6, 3e-5, {.all = 3e-5, .per_tensor = 4e-4}}},
        // 6.8e-8, 6.4e-8, 1.2e-8, 4.6e-8 (h.0.ln_2.bias)
        LayoutPair{.from = {},
                   .to = {.tp = 2, .pp = 2, .schedule = "zb-h1"},
                   .bounds = {1e-6, 1e-6, {.all = 1.2e-7, .per_tensor = 5e-7}}},
        // 0, 3.7e-7, 5.8e-8, 1.1e-6; the last 1.1e-5 on an AVX-512 Xeon (2026-12-04,
        // h.3.attn.qkv.bias; the same bits at ff3b731, before that day's changes): oneDNN's
        // kernels there sum in other orders, and a small bias's relative error shows it most
        LayoutPair{.from = {.pp = 2, .dp = 2, .vp = 2, .zero = 1, .schedule = "interleaved"},
                   .to = {.tp = 2, .pp = 2},
                   .bounds = {1e-6, 4e-6, {.all = 6e-7, .per_tensor = 2.5e-5}}},
        // 1.9e-7, 5.0e-6, 5.3e-6, 6.3e-5
        LayoutPair{.from = {.tp = 2, .dp = 2, .zero = 3, .sp = true},
                   .to = {.pp = 2, .dp = 2, .zero = 2, .schedule = "gpipe"},
                   .bounds = {2e-6, 5e-5, {.all = 5e-5, .per_tensor = 6e-4}}},
        // The model with every modern choice (rotary positions, RMSNorm, SwiGLU, grouped-query
        // attention split by tp, an untied head, no biases):
        // 3.8e-7, 7.5e-6, 4.9e-6, 2.9e-5 (h.3.mlp.fc.weight)
        LayoutPair{.from = {.tp = 2, .pp = 2},
                   .to = {.dp = 4, .zero = 3},
                   .bounds = {4e-6, 8e-5, {.all = 5e-5, .per_tensor = 3e-4}},
                   .llama = true},
        // 8.5e-8, 1.1e-7, 1.4e-7, 9.9e-7 (h.3.mlp.fc.weight)
        LayoutPair{.from = {.pp = 2, .dp = 2, .vp = 2, .zero = 1, .schedule = "interleaved"},
                   .to = {.tp = 2, .dp = 2, .zero = 2, .sp = true},
                   .bounds = {1e-6, 1.1e-6, {.all = 1.4e-6, .per_tensor = 1e-5}},
                   .llama = true}),
    pair_name);

}  // namespace
}  // namespace weft
