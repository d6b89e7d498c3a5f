// `weft ckpt` as a user runs it, on a checkpoint of the tiny model: inspect prints the config, the
// layout, every tensor and every file with its checksum, and exits 1 when a file does not verify;
// export-hf then import-hf gives a checkpoint that `weft generate` samples exactly as the original;
// an import never writes over a run's checkpoints.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/temp_dir.h"
#include "support/run_command.h"
#include "weft/checkpoint/checkpoint.h"
#include "weft/model/param_layout.h"

namespace weft {
namespace {

using Output = test::CommandOutput;

Output weft(const std::string& args) {
  return test::run_command(std::string(WEFT_BIN) + " " + args);
}

#define EXPECT_HAS(haystack, needle)                                                       \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "no '" << (needle) << "' in:\n" \
                                                        << (haystack)

class CkptCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_.name = "tiny";
    cfg_.n_layer = 2;
    cfg_.n_embd = 32;
    cfg_.n_head = 4;
    cfg_.vocab_size = 61;
    cfg_.pad_vocab_to = 16;
    cfg_.max_seq_len = 16;
    const auto layout = model::gpt_param_layout(cfg_);
    FlatBuffer params(layout.buffer);
    model::init_params(params, layout, 7);
    optim::AdamW opt(layout.buffer, layout.weight_decay_flags());
    opt.set_step_count(7);
    checkpoint::TrainState st;
    st.step = 7;
    st.seed = 1234;
    st.tokenizer = "none";
    dir_ = checkpoint::save(tmp_.path("run"), cfg_, params, &opt, st).value_or_throw("save");
  }

  weft::testing::TempDir tmp_;
  model::GptConfig cfg_;
  std::string dir_;
};

TEST_F(CkptCommandTest, InspectPrintsConfigLayoutTensorsAndVerifiedFiles) {
  const Output o = weft("ckpt inspect " + tmp_.path("run"));
  EXPECT_EQ(o.rc, 0) << o.text;
  EXPECT_HAS(o.text, "checkpoint  " + dir_ + " (weft-checkpoint v2)");
  EXPECT_HAS(o.text,
             "model       tiny: n_layer=2 n_embd=32 n_head=4 vocab_size=61 (padded to 64) "
             "max_seq_len=16");
  EXPECT_HAS(o.text, "layout      tp=1 pp=1 dp=1 vp=1 zero=0 (loads under any other)");
  EXPECT_HAS(o.text, "step        7");
  EXPECT_HAS(o.text, "optimizer   adamw step 7");
  EXPECT_HAS(o.text, "params  h.1.attn.qkv.weight   f32    [96, 32]");
  EXPECT_HAS(o.text, "adam_v  ln_f.bias");
  EXPECT_HAS(o.text, "model-tp0-pp0.bin      ");
  EXPECT_HAS(o.text, "optim-tp0-dp0-pp0.bin");
  EXPECT_GT(std::count(o.text.begin(), o.text.end(), '\n'), 3 * 28);  // a line per tensor
  EXPECT_EQ(o.text.find("FAILED"), std::string::npos) << o.text;
}

TEST_F(CkptCommandTest, InspectExitsNonZeroNamingAFileThatDoesNotVerify) {
  {
    std::fstream f(dir_ + "/optim-tp0-dp0-pp0.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const Output o = weft("ckpt inspect " + dir_);
  EXPECT_EQ(o.rc, 1) << o.text;
  EXPECT_HAS(o.text, "FAILED");
  EXPECT_HAS(o.text, dir_ + "/optim-tp0-dp0-pp0.bin: checkpoint shard is corrupt");
  EXPECT_HAS(o.text, "weft: error: 1 of the 2 files of " + dir_ + " do not verify");
}

TEST_F(CkptCommandTest, ExportThenImportSamplesExactlyAsTheOriginal) {
  const Output e = weft("ckpt export-hf " + tmp_.path("run") + " " + tmp_.path("hf"));
  ASSERT_EQ(e.rc, 0) << e.text;
  EXPECT_HAS(e.text, "wrote " + tmp_.path("hf") + "/model.safetensors (28 tensors");
  const Output i = weft("ckpt import-hf " + tmp_.path("hf") + " " + tmp_.path("imported"));
  ASSERT_EQ(i.rc, 0) << i.text;
  EXPECT_HAS(i.text, "wrote " + tmp_.path("imported") + "/step_00000000 (weights only");
  // Greedy sampling from both: the same tokens, so the same parameters reached the model.
  const std::string sample = "generate --prompt '3 1 4' --tokens 8 --temperature 0 --threads 1";
  const Output a = weft(sample + " --checkpoint " + tmp_.path("run"));
  const Output b = weft(sample + " --checkpoint " + tmp_.path("imported"));
  ASSERT_EQ(a.rc, 0) << a.text;
  ASSERT_EQ(b.rc, 0) << b.text;
  EXPECT_EQ(b.text, a.text);
  EXPECT_HAS(b.text, "3 1 4 |");
}

TEST_F(CkptCommandTest, ImportRefusesARunsCheckpointDirectory) {
  ASSERT_EQ(weft("ckpt export-hf " + dir_ + " " + tmp_.path("hf")).rc, 0);
  const Output o = weft("ckpt import-hf " + tmp_.path("hf") + " " + tmp_.path("run"));
  EXPECT_EQ(o.rc, 1) << o.text;
  EXPECT_HAS(o.text, tmp_.path("run") + ": already holds checkpoints");
  EXPECT_EQ(checkpoint::list_checkpoints(tmp_.path("run")).size(), 1u);
}

}  // namespace
}  // namespace weft
