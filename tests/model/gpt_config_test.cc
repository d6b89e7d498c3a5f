#include "weft/model/gpt_config.h"

#include <gtest/gtest.h>

#include <string>

using weft::model::GptConfig;
using weft::model::parse_gpt_config;

namespace {
bool has(const weft::Status& s, const std::string& text) {
  for (const auto& p : s.problems()) {
    if (p.find(text) != std::string::npos) return true;
  }
  return false;
}
}  // namespace

TEST(GptConfig, ParsesTheGpt2SmallPreset) {
  auto r =
      weft::model::load_gpt_config(std::string(WEFT_SOURCE_DIR) + "/configs/models/gpt2-124m.toml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GptConfig& c = r.value();
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.n_embd, 768);
  EXPECT_EQ(c.head_size(), 64);
  EXPECT_EQ(c.padded_vocab(), 50304);
}

TEST(GptConfig, ReportsEveryProblemAtOnce) {
  auto r = parse_gpt_config(R"([model]
n_layer = 0
n_embd = 768
n_head = 5
vocab_size = -3
max_seq_len = 64
)",
                            "bad.toml");
  ASSERT_FALSE(r.ok());
  const auto& s = r.status();
  EXPECT_EQ(s.problems().size(), 3u) << s.message();
  EXPECT_TRUE(has(s, "n_layer=0 must be > 0"));
  EXPECT_TRUE(has(s, "n_embd=768 is not divisible by n_head=5"));
  EXPECT_TRUE(has(s, "vocab_size=-3 must be > 0"));
  EXPECT_TRUE(has(s, "bad.toml"));
}

TEST(GptConfig, UnknownKeySuggestsTheNearestOne) {
  auto r = parse_gpt_config(
      "[model]\nn_layer=2\nn_embed=32\nn_head=4\nvocab_size=10\n"
      "max_seq_len=8\n",
      "typo.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has(r.status(), "unknown key model.n_embed (did you mean 'n_embd'?)"))
      << r.status().message();
  EXPECT_TRUE(has(r.status(), "missing key model.n_embd"));
}

TEST(GptConfig, SequenceLongerThanThePositionTableIsRejected) {
  GptConfig c{"x", 2, 32, 4, 61, 16, 16};
  EXPECT_TRUE(weft::model::validate_for_run(c, 16).ok());
  auto s = weft::model::validate_for_run(c, 17);
  EXPECT_TRUE(has(s, "sequence length 17 is larger than the position table (max_seq_len=16)"));
}

TEST(GptConfig, MissingFileAndSyntaxErrorsNameTheFile) {
  auto missing = weft::model::load_gpt_config("/nonexistent/model.toml");
  EXPECT_TRUE(has(missing.status(), "/nonexistent/model.toml: cannot open"));
  auto syntax = parse_gpt_config("[model\nn_layer=", "broken.toml");
  EXPECT_TRUE(has(syntax.status(), "broken.toml: TOML syntax error at line 1"));
}

// Found by fuzzing parse_gpt_config (tests/fuzz/model_config_fuzz.cc): 4294967297 was read as 1, a
// float for an integer key was cast out of range inside toml++, and vocab_size=2^31-1 overflowed
// padded_vocab().
TEST(GptConfig, IntegersThatDoNotFitAnIntOrAreFloatsAreErrors) {
  const std::string rest = "n_embd=32\nn_head=4\npad_vocab_to=128\nmax_seq_len=16\n";
  auto r = parse_gpt_config("[model]\nn_layer=2\nvocab_size=4294967297\n" + rest, "big.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has(r.status(), "big.toml: model.vocab_size=4294967297 is out of range"))
      << r.status().message();
  r = parse_gpt_config("[model]\nn_layer=1e85\nvocab_size=61\n" + rest, "float.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has(r.status(), "model.n_layer must be an integer")) << r.status().message();
  r = parse_gpt_config("[model]\nn_layer=2\nvocab_size=2147483647\n" + rest, "pad.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has(r.status(), "vocab_size=2147483647 rounded up to pad_vocab_to=128 exceeds"))
      << r.status().message();
  GptConfig huge{"x", 1 << 20, 1 << 28, 1, 61, 16, 16};
  EXPECT_TRUE(has(weft::model::validate(huge), "more than 2^62"))
      << weft::model::validate(huge).message();
}
