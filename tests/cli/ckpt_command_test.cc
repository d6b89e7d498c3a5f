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

// A model with Llama's choices: inspect names them, export-hf writes a LlamaForCausalLM with
// GPT-2's tokenizer files, and its import samples as the original; a model neither GPT-2 nor Llama
// is refused, naming why, and nothing is written.
TEST_F(CkptCommandTest, ALlamaModelExportsAsLlamaForCausalLMAndComesBack) {
  model::GptConfig c = cfg_;
  c.name = "tiny-llama";
  c.vocab_size = 50257;  // GPT-2's tokenizer, written beside the weights
  c.n_kv_head = 2;
  c.ffn_hidden_size = 48;
  c.position = model::Position::Rope;
  c.norm = model::NormKind::RMSNorm;
  c.mlp = model::MlpKind::SwiGLU;
  c.tie_embeddings = false;
  c.bias = false;
  const auto layout = model::gpt_param_layout(c);
  FlatBuffer params(layout.buffer);
  model::init_params(params, layout, 7);
  checkpoint::TrainState st;
  st.step = 3;
  st.tokenizer = "gpt2";
  st.tokenizer_identity = "gpt2";
  ASSERT_TRUE(checkpoint::save(tmp_.path("llama"), c, params, nullptr, st).ok());
  const Output in = weft("ckpt inspect " + tmp_.path("llama"));
  EXPECT_EQ(in.rc, 0) << in.text;
  EXPECT_HAS(in.text,
             "n_kv_head=2 ffn_hidden_size=48 position=rope rope_theta=10000 "
             "norm=rmsnorm mlp=swiglu tie_embeddings=false bias=false");
  const Output e = weft("ckpt export-hf " + tmp_.path("llama") + " " + tmp_.path("hf"));
  ASSERT_EQ(e.rc, 0) << e.text;
  EXPECT_HAS(e.text, tmp_.path("hf") + "/config.json (LlamaForCausalLM), with the tokenizer");
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"}) {
    EXPECT_TRUE(std::filesystem::exists(tmp_.path("hf") + "/" + f)) << f;
  }
  const Output i = weft("ckpt import-hf " + tmp_.path("hf") + " " + tmp_.path("imported"));
  ASSERT_EQ(i.rc, 0) << i.text;
  EXPECT_HAS(i.text, "tokenizer gpt2");
  const std::string sample = "generate --prompt 'Hello' --tokens 6 --temperature 0 --threads 1";
  const Output a = weft(sample + " --checkpoint " + tmp_.path("llama"));
  const Output b = weft(sample + " --checkpoint " + tmp_.path("imported"));
  ASSERT_EQ(a.rc, 0) << a.text;
  EXPECT_EQ(b.text, a.text);

  c.name = "mixed";
  c.norm = model::NormKind::LayerNorm;
  ASSERT_TRUE(checkpoint::save(tmp_.path("mixed"), c, params, nullptr, st).ok());
  const Output m = weft("ckpt export-hf " + tmp_.path("mixed") + " " + tmp_.path("hf-mixed"));
  EXPECT_EQ(m.rc, 1) << m.text;
  EXPECT_HAS(m.text, "LlamaForCausalLM cannot hold norm=layernorm (its norms are RMSNorms)");
  EXPECT_FALSE(std::filesystem::exists(tmp_.path("hf-mixed")));
}

}  // namespace
}  // namespace weft
