// The whole model against an independent implementation: PyTorch (Debian's python3-torch, in
// float64) on identical weights and tokens. Loss and every parameter gradient agree to 1e-5.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "weft/core/rng.h"
#include "weft/model/gpt.h"
#include "weft/model/param_layout.h"

namespace fs = std::filesystem;
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

void check_against_torch(Recompute recompute, const GptConfig& cfg = oracle_config()) {
  const int B = 2, T = 8;
  Gpt gpt(cfg, B, T, recompute);
  gpt.init(42);
  // Give biases and LayerNorm parameters non-trivial values so their gradients are tested too.
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
  const float loss = gpt.forward(tokens.data(), targets.data(), B, T);
  gpt.backward();

  const fs::path dir =
      fs::temp_directory_path() / ("weft_torch_oracle_" + std::to_string(::getpid()) + "_" +
                                   std::string(weft::model::recompute_name(recompute)) + "_" +
                                   cfg.name);
  fs::create_directories(dir);
  nlohmann::json c = {{"B", B},
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
  std::ofstream(dir / "config.json") << c.dump();
  nlohmann::json layout = nlohmann::json::array();
  for (const auto& s : slices)
    layout.push_back({{"name", s.name}, {"shape", s.shape}, {"offset", s.offset}});
  std::ofstream(dir / "layout.json") << layout.dump();
  write_raw(dir / "params.bin",
            std::vector<float>(gpt.params().data(), gpt.params().data() + gpt.params().size()));
  write_raw(dir / "tokens.bin", tokens);
  write_raw(dir / "targets.bin", targets);

  const std::string cmd =
      std::string(WEFT_TORCH_PYTHON) + " " + WEFT_TORCH_SCRIPT + " " + dir.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the PyTorch reference failed: " << cmd;

  nlohmann::json out = nlohmann::json::parse(std::ifstream(dir / "loss.json"));
  const double torch_loss = out["loss"];
  EXPECT_LE(std::abs(loss - torch_loss) / std::abs(torch_loss), 1e-5)
      << "weft " << loss << " torch " << torch_loss;

  const auto ref = read_doubles(dir / "grads.bin", gpt.grads().size());
  for (const auto& s : slices) {
    double diff = 0, norm = 0;
    for (int64_t j = 0; j < s.numel; ++j) {
      const double a = gpt.grads().data()[s.offset + j], b = ref[s.offset + j];
      diff += (a - b) * (a - b);
      norm += b * b;
    }
    EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm) + 1e-12)
        << s.name << ": relative error " << std::sqrt(diff / (norm + 1e-300));
  }
  fs::remove_all(dir);
}

}  // namespace

TEST(GptAgainstPyTorch, LossAndEveryGradientMatchWithoutRecomputation) {
  check_against_torch(Recompute::None);
}

TEST(GptAgainstPyTorch, LossAndEveryGradientMatchWithFullRecomputation) {
  check_against_torch(Recompute::Full);
}

TEST(GptAgainstPyTorch, LlamaVariantLossAndEveryGradientMatch) {
  check_against_torch(Recompute::None, llama_config());
}

TEST(GptAgainstPyTorch, LlamaVariantMatchesWithFullRecomputation) {
  check_against_torch(Recompute::Full, llama_config());
}

// Each choice on its own, against GPT-2's others: multi-query attention with biases, learned
// positions and LayerNorm without biases around a SwiGLU MLP.
TEST(GptAgainstPyTorch, EachChoiceAloneMatches) {
  GptConfig mqa = oracle_config();
  mqa.name = "mqa";
  mqa.n_kv_head = 1;
  mqa.position = weft::model::Position::Rope;
  check_against_torch(Recompute::None, mqa);
  GptConfig glu = oracle_config();
  glu.name = "glu";
  glu.mlp = weft::model::MlpKind::SwiGLU;
  glu.bias = false;
  glu.norm_eps = 1e-3f;
  check_against_torch(Recompute::None, glu);
}
