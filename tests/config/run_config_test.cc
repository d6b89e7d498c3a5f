// Run configs: parsing, defaults, --set overrides, misspelled keys with suggestions, and every
// validation problem reported together in the config's own terms.

#include "weft/config/run_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace weft::config {
namespace {

const char* kModel = R"(
[model]
name = "tiny"
n_layer = 2
n_embd = 32
n_head = 4
vocab_size = 61
pad_vocab_to = 16
max_seq_len = 16
)";

std::string run_toml(const std::string& extra = "") {
  return std::string(kModel) + "\n[data]\ntrain = \"data/x.bin\"\n[train]\nsteps = 10\n" + extra;
}

RunConfig parse_ok(const std::string& text, const std::vector<std::string>& sets = {}) {
  return parse_run_config(text, "run.toml", sets).value_or_throw("parse");
}

// Every problem of a config that should fail, one string.
std::string problems(const std::string& text, const std::vector<std::string>& sets = {}) {
  auto r = parse_run_config(text, "run.toml", sets);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

#define EXPECT_HAS(haystack, needle)                                                       \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "no '" << (needle) << "' in:\n" \
                                                        << (haystack)

TEST(RunConfig, ParsesTheTablesAndFillsDefaults) {
  const RunConfig c = parse_ok(run_toml("micro_batch = 2\nglobal_batch = 8\nlr = 1e-3\n"));
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.vocab_size, 61);
  EXPECT_EQ(c.data.train, "data/x.bin");
  EXPECT_EQ(c.data.tokenizer, "gpt2");
  EXPECT_DOUBLE_EQ(c.data.val_fraction, 0.05);
  EXPECT_EQ(c.train.seq_len, 16);  // 0 means the model's max_seq_len
  EXPECT_EQ(c.parallel.micro_batch, 2);
  EXPECT_EQ(c.train.global_batch, 8);
  EXPECT_EQ(c.microbatches(), 4);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.train.beta2, 0.95);
  EXPECT_EQ(c.run.out_dir, "runs/run");  // the TOML file's stem
  EXPECT_EQ(c.checkpoint_root(), "runs/run/checkpoints");
  EXPECT_EQ(c.parallel.schedule, schedule::Kind::OneFOneB);
  EXPECT_EQ(c.parallel.recompute, model::Recompute::None);
  // global_batch defaults to one micro batch.
  EXPECT_EQ(parse_ok(run_toml()).train.global_batch, 4);
}

TEST(RunConfig, SetOverridesAreTypedByTheKey) {
  const RunConfig c = parse_ok(
      run_toml(), {"train.lr=3e-4", "train.steps=7", "data.tokenizer=none", "train.clip=2",
                   "run.out_dir=\"/tmp/o\"", "model.n_layer=3", "parallel.schedule=gpipe"});
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.data.tokenizer, "none");
  EXPECT_DOUBLE_EQ(c.train.clip, 2.0);  // an integer is a fine number
  EXPECT_EQ(c.run.out_dir, "/tmp/o");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.parallel.schedule, schedule::Kind::GPipe);
  // A key the file does not mention at all, in a section it does not have.
  EXPECT_EQ(parse_ok(run_toml(), {"parallel.tp=1"}).parallel.tp, 1);
}

TEST(RunConfig, BadOverridesSayWhatIsWrongAndSuggestTheNearestKey) {
  const std::string p = problems(
      run_toml(), {"train.lrr=1", "train.steps=ten", "train.lr=fast", "nodot=1", "trian.steps=3"});
  EXPECT_HAS(p, "--set train.lrr=1: unknown key train.lrr (did you mean 'train.lr'?)");
  EXPECT_HAS(p, "train.steps takes an integer, not 'ten'");
  EXPECT_HAS(p, "train.lr takes a number, not 'fast'");
  EXPECT_HAS(p, "--set nodot=1: expected section.key=value");
  EXPECT_HAS(p, "unknown key trian.steps (did you mean 'train.steps'?)");
}

TEST(RunConfig, UnknownKeysAndSectionsInTheFileSuggestTheNearest) {
  std::string text = run_toml("learning_rate = 1e-3\nwarmup_step = 5\n") + "[trian]\nx = 1\n";
  text += "[parallel]\ntp = 1\nzer = 0\n";
  const std::string p = problems(text);
  EXPECT_HAS(p, "run.toml: unknown key train.warmup_step (did you mean 'train.warmup_steps'?)");
  EXPECT_HAS(p, "run.toml: unknown key train.learning_rate");
  EXPECT_HAS(p, "run.toml: unknown section [trian] (did you mean 'train'?)");
  EXPECT_HAS(p, "unknown key parallel.zer (did you mean 'parallel.zero'?)");
  const std::string m =
      problems(run_toml() + "\n[model]\n");  // a duplicate table is a syntax error
  EXPECT_HAS(m, "run.toml: TOML syntax error");
  std::string model_typo = run_toml();
  model_typo.replace(model_typo.find("n_embd"), 6, "n_embed");
  EXPECT_HAS(problems(model_typo), "unknown key model.n_embed (did you mean 'n_embd'?)");
}

TEST(RunConfig, WrongTypesAreNamed) {
  std::string text = run_toml("lr = \"high\"\n");
  text.replace(text.find("steps = 10"), 10, "steps = 1.5");
  const std::string p = problems(text);
  EXPECT_HAS(p, "run.toml: train.lr must be a number");
  EXPECT_HAS(p, "run.toml: train.steps must be an integer");
}

TEST(RunConfig, ModelConfigFileIsReadAndInlineKeysOverrideIt) {
  const std::string path = WEFT_SOURCE_DIR "/configs/models/tiny.toml";
  const std::string text = "[model]\nconfig = \"" + path +
                           "\"\nn_layer = 3\n[data]\ntrain = \"x\"\n[train]\nsteps = 1\n";
  const RunConfig c = parse_ok(text);
  // The model is no longer the file's "tiny": its name says what changed, in the logs too.
  EXPECT_EQ(c.model.name, "tiny+n_layer=3");
  EXPECT_EQ(c.model.n_embd, 32);
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model_config, path);
  EXPECT_EQ(parse_ok(text, {"model.n_embd=64"}).model.name, "tiny+n_embd=64+n_layer=3");
  EXPECT_EQ(parse_ok(text, {"model.n_layer=2"}).model.name, "tiny");  // the file's own value
  EXPECT_EQ(parse_ok(text, {"model.name=mine"}).model.name, "mine");
  EXPECT_HAS(
      problems("[model]\nconfig = \"/no/such.toml\"\n[data]\ntrain = \"x\"\n[train]\nsteps = 1\n"),
      "cannot open model config /no/such.toml");
  EXPECT_HAS(problems("[data]\ntrain = \"x\"\n[train]\nsteps = 1\n"), "missing [model] table");
}

TEST(RunConfig, ValidationListsEveryProblemInTheConfigsTerms) {
  const std::string p = problems(std::string(kModel) + R"(
[data]
val_fraction = 1.5
[train]
seq_len = 32
micro_batch = 4
global_batch = 10
steps = 0
lr = -1
min_lr = 1
warmup_steps = -2
beta1 = 1.0
eps = 0
clip = -1
eval_every = -1
save_every = -1
keep_last = -1
threads = -1
recompute = "some"
log_every = 0
peak_gflops = -5
[parallel]
tp = 3
pp = 4
dp = 0
vp = 2
schedule = "2f2b"
zero = 5
)");
  for (const char* expected : {
           "data.train is missing",
           "data.val_fraction=1.5 must be in [0, 1)",
           "train.seq_len=32 is larger than the position table (model.max_seq_len=16)",
           "train.steps=0 must be > 0",
           "train.lr=-1 must be > 0",
           "train.min_lr=1 must be in [0, train.lr=-1]",
           "train.warmup_steps=-2 must be >= 0",
           "train.beta1=1 must be in [0, 1)",
           "train.eps=0 must be > 0",
           "train.clip=-1 must be >= 0",
           "train.eval_every=-1 must be >= 0",
           "train.save_every=-1 must be >= 0",
           "train.keep_last=-1 must be >= 0",
           "train.threads=-1 must be >= 0",
           "train.recompute='some' must be none, selective or full",
           "train.log_every=0 must be > 0",
           "train.peak_gflops=-5 must be >= 0",
           "n_head=4 is not divisible by tp=3",
           "n_layer=2 does not split into pp*vp = 4*2 = 8 stages of equal size",
           "parallel.dp=0 must be >= 1",
           "parallel.schedule='2f2b' must be gpipe, 1f1b, interleaved or zb-h1",
           "parallel.zero=5 must be 0, 1, 2 or 3",
       }) {
    EXPECT_HAS(p, expected);
  }
  // An unknown name is its own problem, without the checks of the default kept in its place (1f1b
  // would not take vp=2).
  const std::string unnamed = problems(run_toml(), {"parallel.vp=2", "parallel.schedule=\"2f2b\""});
  EXPECT_HAS(unnamed, "parallel.schedule='2f2b' must be gpipe, 1f1b, interleaved or zb-h1");
  EXPECT_EQ(unnamed.find("parallel.schedule='1f1b'"), std::string::npos) << unnamed;
  EXPECT_HAS(problems(run_toml("micro_batch = 4\nglobal_batch = 10\n")),
             "train.global_batch=10 is not divisible by train.micro_batch=4");
  EXPECT_HAS(problems(run_toml("micro_batch = 2\nglobal_batch = 12\n"), {"parallel.dp=4"}),
             "train.global_batch=12 is not divisible by train.micro_batch=2 x parallel.dp=4");
  EXPECT_HAS(problems(run_toml(), {"data.val_fraction=0"}),
             "train.eval_every=100 needs validation data");
}

TEST(RunConfig, APipelineScheduleThatDoesNotFitIsRejectedBeforeLaunch) {
  const std::string p = problems(
      run_toml("micro_batch = 1\nglobal_batch = 3\n"),
      {"model.n_layer=4", "parallel.pp=2", "parallel.vp=2", "parallel.schedule=interleaved"});
  EXPECT_HAS(p, "parallel.schedule='interleaved' with pp=2 vp=2 and 3 microbatches");
  EXPECT_EQ(parse_ok(run_toml("micro_batch = 1\nglobal_batch = 4\n"),
                     {"model.n_layer=4", "parallel.pp=2", "parallel.vp=2",
                      "parallel.schedule=interleaved"})
                .parallel.schedule,
            schedule::Kind::Interleaved);
  EXPECT_HAS(problems(run_toml("micro_batch = 1\nglobal_batch = 1\n"), {"parallel.pp=2"}),
             "and 1 microbatches");
  EXPECT_HAS(problems(run_toml("recompute = \"full\"\n"), {"parallel.schedule=zb-h1"}),
             "train.recompute must be none or selective");
}

TEST(RunConfig, SequenceParallelismIsABooleanInTomlAndOnTheCommandLine) {
  EXPECT_TRUE(
      parse_ok(run_toml() + "[parallel]\nsequence_parallel = true\n").parallel.sequence_parallel);
  EXPECT_TRUE(parse_ok(run_toml(), {"parallel.sequence_parallel=true"}).parallel.sequence_parallel);
  EXPECT_FALSE(parse_ok(run_toml(), {"parallel.sequence_parallel=0"}).parallel.sequence_parallel);
  EXPECT_HAS(problems(run_toml(), {"parallel.sequence_parallel=yes"}),
             "parallel.sequence_parallel takes true or false, not 'yes'");
  EXPECT_HAS(problems(run_toml() + "[parallel]\nsequence_parallel = 1\n"),
             "parallel.sequence_parallel must be true or false");
}

TEST(RunConfig, LoadNamesAMissingFile) {
  auto r = load_run_config("/no/such/run.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.status().message(), "/no/such/run.toml: cannot open run config");
}

TEST(RunConfig, ToJsonHoldsEveryKeyAndTheKeyTableHasDefaultsAndHelp) {
  const RunConfig c = parse_ok(run_toml());
  const auto j = c.to_json();
  for (const auto& k : run_config_keys()) {
    const auto dot = k.name.find('.');
    const std::string section = k.name.substr(0, dot), key = k.name.substr(dot + 1);
    if (key == "config") continue;  // only when given
    EXPECT_TRUE(j.contains(section) && j[section].contains(key)) << k.name;
    EXPECT_FALSE(k.help.empty()) << k.name;
  }
  bool found = false;
  for (const auto& k : run_config_keys()) {
    if (k.name == "train.beta2") {
      found = true;
      EXPECT_EQ(k.default_value, "0.95");
      EXPECT_EQ(k.type, KeyType::Float);
    }
  }
  EXPECT_TRUE(found);
}

// A dataset with a given length and sidecar facts.
class FakeDataset final : public data::TokenDataset {
 public:
  FakeDataset(int64_t n, std::optional<int> vocab, std::string tokenizer)
      : n_(n), vocab_(vocab), tokenizer_(std::move(tokenizer)) {}
  int64_t num_tokens() const override { return n_; }
  int64_t num_documents() const override { return 1; }
  void read(int64_t offset, int64_t n, int32_t* out) const override {
    for (int64_t i = 0; i < n; ++i) out[i] = 0;
  }
  std::optional<int> vocab_size() const override { return vocab_; }
  std::string tokenizer() const override { return tokenizer_; }
  std::string describe() const override { return "fake"; }

 private:
  int64_t n_;
  std::optional<int> vocab_;
  std::string tokenizer_;
};

TEST(RunConfig, ValidateDataChecksSizesAndVocabularies) {
  const RunConfig c = parse_ok(run_toml("micro_batch = 2\nglobal_batch = 4\neval_batches = 2\n"),
                               {"data.val_fraction=0.2"});
  // 50 windows of 17 tokens: 40 train, 10 validation: enough.
  EXPECT_TRUE(validate_data(c, FakeDataset(16 * 50 + 1, 61, "t"), "t", 61).ok());
  // 3 windows: 2 for training, 1 for validation.
  const std::string small = validate_data(c, FakeDataset(16 * 3 + 1, 61, ""), "", 0).message();
  EXPECT_HAS(small,
             "data/x.bin: 49 tokens make 3 windows of train.seq_len+1=17 tokens, 2 for "
             "training after data.val_fraction=0.2: fewer than one global batch "
             "(train.global_batch=4)");
  EXPECT_HAS(small, "the validation split has 1 windows");
  // Vocabularies: the dataset's and the tokenizer's must fit the model's, and agree.
  const std::string vocab =
      validate_data(c, FakeDataset(16 * 50 + 1, 50257, "gpt2"), "gpt2", 50257).message();
  EXPECT_HAS(vocab, "data/x.bin");
  EXPECT_HAS(vocab, "50257");
  EXPECT_HAS(vocab, "vocab_size=61");
  const std::string tok =
      validate_data(c, FakeDataset(16 * 50 + 1, 61, "bpe-61-abc"), "gpt2", 0).message();
  EXPECT_HAS(tok, "tokenizer mismatch");
  const std::string tv =
      validate_data(c, FakeDataset(16 * 50 + 1, 60, ""), "x", 60).ok() ? "" : "unexpected";
  EXPECT_EQ(tv, "");  // a smaller vocabulary than the model's is fine
}

}  // namespace
}  // namespace weft::config
