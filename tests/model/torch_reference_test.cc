// The whole model against an independent implementation: PyTorch (Debian's python3-torch, in
// float64) on identical weights and tokens, for GPT-2 and for the variants (rotary positions,
// RMSNorm, SwiGLU, grouped- and multi-query attention, untied head, no biases). Loss and every
// parameter gradient agree to 1e-5.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/rng.h"
#include "weft/model/gpt.h"
#include "weft/model/param_layout.h"

namespace fs = std::filesystem;
using weft::SliceSpec;
using weft::model::Gpt;
using weft::model::GptConfig;
using weft::model::Recompute;

namespace {

template <typename T>
void write_raw(const fs::path& p, const std::vector<T>& v) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()),
             static_cast<std::streamsize>(v.size() * sizeof(T)));
}

std::vector<double> read_doubles(const fs::path& p, size_t n) {
  std::vector<double> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(double)));
  EXPECT_TRUE(f.good()) << "short read of " << p;
  return v;
}

GptConfig oracle_config() {
  GptConfig cfg;
  cfg.name = "oracle";
  cfg.n_layer = 2;
  cfg.n_embd = 32;
  cfg.n_head = 4;
  cfg.vocab_size = 61;  // padded to 64: the padding must stay out of the softmax
  cfg.pad_vocab_to = 16;
  cfg.max_seq_len = 16;
  return cfg;
}

// Llama's choices (Touvron et al. 2023), with grouped-query attention of 2 key/value heads for 4
// query heads and an MLP width that is not 4C.
GptConfig llama_config() {
  GptConfig cfg = oracle_config();
  cfg.position = weft::model::Position::Rope;
  cfg.rope_theta = 500.0f;  // a small base: the angles of T = 8 positions span several turns
  cfg.norm = weft::model::NormKind::RMSNorm;
  cfg.norm_eps = 1e-6f;
  cfg.mlp = weft::model::MlpKind::SwiGLU;
  cfg.ffn_hidden_size = 48;
  cfg.n_kv_head = 2;
  cfg.tie_embeddings = false;
  cfg.bias = false;
  return cfg;
}

// One case: weft's loss and gradients, and where the oracle's answer goes.
struct Case {
  Case() = default;
  Case(GptConfig c, Recompute r) : cfg(std::move(c)), recompute(r) {}
  GptConfig cfg;
  Recompute recompute = Recompute::None;
  fs::path dir;
  float loss = 0;
  std::vector<float> grads;
  std::vector<SliceSpec> slices;
};

// weft's forward and backward of `c`, and the oracle's inputs in c.dir.
void run_weft(Case& c) {
  const GptConfig& cfg = c.cfg;
  const int B = 2, T = 8;
  Gpt gpt(cfg, B, T, c.recompute);
  gpt.init(42);
  // Give biases and norm parameters non-trivial values so their gradients are tested too.
  const auto& slices = gpt.param_layout().buffer.slices();
  for (size_t i = 0; i < slices.size(); ++i) {
    if (gpt.param_layout().init[i].kind != weft::model::ParamInit::Kind::Normal) {
      float* p = gpt.params().data() + slices[i].offset;
      for (int64_t j = 0; j < slices[i].numel; ++j) {
        p[j] += 0.1f * weft::normal_at(weft::stream_key(9, slices[i].name), j);
      }
    }
  }
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 37 + 11) % cfg.vocab_size;
    targets[i] = (i * 53 + 5) % cfg.vocab_size;
  }
  targets[3] = -1;  // an ignored position

  gpt.zero_grad();
  c.loss = gpt.forward(tokens.data(), targets.data(), B, T);
  gpt.backward();
  c.grads.assign(gpt.grads().data(), gpt.grads().data() + gpt.grads().size());
  c.slices = slices;

  fs::create_directories(c.dir);
  nlohmann::json j = {{"B", B},
                      {"T", T},
                      {"n_layer", cfg.n_layer},
                      {"n_embd", cfg.n_embd},
                      {"n_head", cfg.n_head},
                      {"vocab_size", cfg.vocab_size},
                      {"position", weft::model::position_name(cfg.position)},
                      {"rope_theta", cfg.rope_theta},
                      {"norm", weft::model::norm_name(cfg.norm)},
                      {"norm_eps", cfg.norm_eps},
                      {"mlp", weft::model::mlp_name(cfg.mlp)},
                      {"ffn_hidden_size", cfg.ffn_hidden_size},
                      {"n_kv_head", cfg.n_kv_head},
                      {"tie_embeddings", cfg.tie_embeddings}};
  std::ofstream(c.dir / "config.json") << j.dump();
  nlohmann::json layout = nlohmann::json::array();
  for (const auto& s : slices)
    layout.push_back({{"name", s.name}, {"shape", s.shape}, {"offset", s.offset}});
  std::ofstream(c.dir / "layout.json") << layout.dump();
  write_raw(c.dir / "params.bin",
            std::vector<float>(gpt.params().data(), gpt.params().data() + gpt.params().size()));
  write_raw(c.dir / "tokens.bin", tokens);
  write_raw(c.dir / "targets.bin", targets);
}

// The loss within 1e-5 relative, and every parameter's gradient within 1e-5 relative L2.
void expect_matches_oracle(const Case& c) {
  nlohmann::json out = nlohmann::json::parse(std::ifstream(c.dir / "loss.json"));
  const double torch_loss = out["loss"];
  EXPECT_LE(std::abs(c.loss - torch_loss) / std::abs(torch_loss), 1e-5)
      << "weft " << c.loss << " torch " << torch_loss;
  const auto ref = read_doubles(c.dir / "grads.bin", c.grads.size());
  for (const auto& s : c.slices) {
    double diff = 0, norm = 0;
    for (int64_t j = 0; j < s.numel; ++j) {
      const double a = c.grads[s.offset + j], b = ref[s.offset + j];
      diff += (a - b) * (a - b);
      norm += b * b;
    }
    EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm) + 1e-12)
        << s.name << ": relative error " << std::sqrt(diff / (norm + 1e-300));
  }
}

// Every case of the suite, computed by weft, then by one run of the oracle over all of them.
class GptAgainstPyTorch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    GptConfig mqa = oracle_config(), glu = oracle_config();
    // Each choice on its own, against GPT-2's others: multi-query attention with biases and
    // rotary positions; LayerNorm without biases (epsilon 1e-3) around a SwiGLU MLP.
    mqa.name = "mqa";
    mqa.n_kv_head = 1;
    mqa.position = weft::model::Position::Rope;
    glu.name = "glu";
    glu.mlp = weft::model::MlpKind::SwiGLU;
    glu.bias = false;
    glu.norm_eps = 1e-3f;
    const fs::path root =
        fs::temp_directory_path() / ("weft_torch_oracle_" + std::to_string(::getpid()));
    cases_ = new std::map<std::string, Case>{{"gpt2", {oracle_config(), Recompute::None}},
                                             {"gpt2-full", {oracle_config(), Recompute::Full}},
                                             {"llama", {llama_config(), Recompute::None}},
                                             {"llama-full", {llama_config(), Recompute::Full}},
                                             {"mqa", {mqa, Recompute::None}},
                                             {"glu", {glu, Recompute::None}}};
    std::string cmd = std::string(WEFT_TORCH_PYTHON) + " " + WEFT_TORCH_SCRIPT;
    for (auto& [name, c] : *cases_) {
      c.dir = root / name;
      run_weft(c);
      cmd.append(" ").append(c.dir.string());
    }
    oracle_rc_ = std::system(cmd.c_str());
  }
  static void TearDownTestSuite() {
    if (!cases_->empty()) fs::remove_all(cases_->begin()->second.dir.parent_path());
    delete cases_;
  }
  static void check(const std::string& name) {
    ASSERT_EQ(oracle_rc_, 0) << "the PyTorch reference failed";
    expect_matches_oracle(cases_->at(name));
  }
  static inline std::map<std::string, Case>* cases_ = nullptr;
  static inline int oracle_rc_ = -1;
};

TEST_F(GptAgainstPyTorch, LossAndEveryGradientMatchWithoutRecomputation) { check("gpt2"); }

TEST_F(GptAgainstPyTorch, LossAndEveryGradientMatchWithFullRecomputation) { check("gpt2-full"); }

TEST_F(GptAgainstPyTorch, LlamaVariantLossAndEveryGradientMatch) { check("llama"); }

TEST_F(GptAgainstPyTorch, LlamaVariantMatchesWithFullRecomputation) { check("llama-full"); }

TEST_F(GptAgainstPyTorch, MultiQueryAttentionWithRotaryPositionsAloneMatches) { check("mqa"); }

TEST_F(GptAgainstPyTorch, SwigluWithUnbiasedLayerNormAloneMatches) { check("glu"); }

}  // namespace
