#pragma once
// End-to-end tests of the `weft` binary (tests/runtime/cli_*_test.cc): a temporary directory per
// test with a synthetic llm.c token dataset in it, the binary run as a user runs it, and the
// fields of the metrics.jsonl it writes, and the parameters of the checkpoints it saves. The
// including target defines WEFT_BIN (the binary) and WEFT_SOURCE_DIR (the repository, where the
// commands run), and links weft_checkpoint.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/llmc_file.h"
#include "support/param_compare.h"
#include "support/run_command.h"
#include "weft/checkpoint/checkpoint.h"
#include "weft/data/llmc_dataset.h"
#include "weft/data/sidecar.h"
#include "weft/model/param_layout.h"

#ifndef WEFT_BIN
#error "cli_fixture.h needs WEFT_BIN, the path of the weft binary"
#endif

#define EXPECT_HAS(haystack, needle)                                                       \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "no '" << (needle) << "' in:\n" \
                                                        << (haystack)

namespace weft::test {

// Runs a shell command line in the repository (stdout and stderr together).
inline CommandOutput weft_command(const std::string& command) {
  return run_command("cd " WEFT_SOURCE_DIR " && " + command);
}

// `weft ARGS`, one process.
inline CommandOutput weft(const std::string& args) { return weft_command(WEFT_BIN " " + args); }

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline int count_lines(const std::string& path) {
  const std::string t = read_text(path);
  return static_cast<int>(std::count(t.begin(), t.end(), '\n'));
}

// The numeric field `key` of every line of metrics.jsonl that has it, in order. The writer prints
// the shortest text that reads back as the same double, so == on these is == on the run's values.
inline std::vector<double> metric(const std::string& metrics, const std::string& key) {
  std::vector<double> out;
  const std::string tag = "\"" + key + "\":";
  std::istringstream in(read_text(metrics));
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find(tag);
    if (at != std::string::npos) out.push_back(std::stod(line.substr(at + tag.size())));
  }
  return out;
}

// The losses of metrics.jsonl, in order.
inline std::vector<double> losses(const std::string& metrics) { return metric(metrics, "loss"); }

// Each step's value of a metric of metrics.jsonl (`actual`) within rel_tol of the reference run's
// (`expected`), relative to the reference; the values are those of steps first_step, first_step +
// 1, ... One failure at most, naming the worst step; returns the largest relative difference.
inline double expect_steps_close(const std::vector<double>& actual,
                                 const std::vector<double>& expected, double rel_tol,
                                 const std::string& what, size_t first_step = 1) {
  EXPECT_EQ(actual.size(), expected.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < actual.size() && i < expected.size(); ++i) {
    const double d = std::abs(actual[i] - expected[i]) / std::abs(expected[i]);
    if (!(d <= worst)) {  // NaN-safe: a NaN is always the worst
      worst = d;
      at = i;
    }
  }
  EXPECT_LE(worst, rel_tol) << what << ": largest relative difference at step " << first_step + at
                            << ": " << (at < actual.size() ? actual[at] : NAN) << " vs "
                            << (at < expected.size() ? expected[at] : NAN);
  return worst;
}

// The parameters of a checkpoint (a step directory, or a root holding `latest`) in the serial
// layout (model::gpt_param_layout of its config), whatever layout wrote it: checkpoint::load
// reshards, as a resumed serial run reads them.
struct CheckpointParams {
  model::GptConfig cfg;
  model::ParamLayout layout;
  FlatBuffer params;
};
inline CheckpointParams checkpoint_params(const std::string& path) {
  const std::string dir = checkpoint::resolve(path).value_or_throw("test checkpoint");
  CheckpointParams c;
  c.cfg = checkpoint::read_metadata(dir).value_or_throw("test checkpoint").model;
  c.layout = model::gpt_param_layout(c.cfg);
  c.params = FlatBuffer(c.layout.buffer);
  checkpoint::load(dir, c.cfg, c.params, nullptr, nullptr).throw_if_error("test checkpoint");
  return c;
}

// The parameters of checkpoint `actual` against those of `expected` (checkpoint_params), every
// tensor and the whole, in relative L2 (test::expect_params_close); returns the errors.
inline ParamErrors expect_checkpoint_params_close(const CheckpointParams& actual,
                                                  const CheckpointParams& expected,
                                                  ParamTolerance tol, const std::string& context) {
  EXPECT_EQ(actual.params.size(), expected.params.size()) << context;
  if (actual.params.size() != expected.params.size()) return {};
  return expect_params_close(expected.layout, actual.params.data(), expected.params.data(),
                             expected.cfg.n_embd, tol, context);
}

// A fresh temporary directory per test, holding the llm.c token file syn.bin (with its sidecar)
// of the tiny models' 61-token vocabulary; removed after the test.
class CliFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    std::replace(name.begin(), name.end(), '/', '_');  // parameterised tests: Prefix/Suite.Name/3
    dir_ = (std::filesystem::temp_directory_path() /
            ("weft_cli_" + std::to_string(::getpid()) + "_" + name))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    write_dataset("syn", 61, "none");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // An llm.c token file NAME.bin with its sidecar NAME.json in the test's directory: n tokens,
  // ids below 61, the sidecar declaring a vocabulary of `vocab`.
  void write_dataset(const std::string& name, int vocab, const std::string& tokenizer,
                     int64_t n = 16 * 50 + 1) {
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < n; ++i)
      tokens.push_back(static_cast<int32_t>((i * 7 + (i / 16) * 3) % 61));
    ASSERT_TRUE(data::write_llmc_tokens(dir_ + "/" + name + ".bin", tokens).ok());
    data::Sidecar s;
    s.tokenizer = tokenizer;
    s.vocab_size = vocab;
    s.eod = vocab - 1;
    s.documents = std::max<int64_t>(1, std::count(tokens.begin(), tokens.end(), vocab - 1));
    s.tokens = n;
    s.source = "synthetic";
    std::ofstream(dir_ + "/" + name + ".json") << data::sidecar_json(s);
  }
  // The default output directory of the tests' run configs, or a path under it.
  std::string out(const std::string& rel = "") const { return dir_ + "/out" + rel; }

  // DIR/run.toml: the tiny model on syn.bin, 8 steps of 4 sequences (micro_batch 2), validation
  // and a checkpoint every 4 steps, into out(); `extra` appended.
  std::string write_run(const std::string& extra = "") {
    const std::string path = dir_ + "/run.toml";
    std::ofstream(path) << "[model]\nconfig = \"" WEFT_SOURCE_DIR "/configs/models/tiny.toml\"\n"
                        << "[data]\ntrain = \"" << dir_ << "/syn.bin\"\nval_fraction = 0.2\n"
                        << "tokenizer = \"none\"\n"
                        << "[train]\nmicro_batch = 2\nglobal_batch = 4\nsteps = 8\nlr = 1e-2\n"
                        << "eval_every = 4\neval_batches = 2\nsave_every = 4\nthreads = 1\n"
                        << "[run]\nout_dir = \"" << dir_ << "/out\"\n"
                        << extra;
    return path;
  }

  std::string dir_;
};

}  // namespace weft::test
