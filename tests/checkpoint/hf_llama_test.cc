// Hugging Face Llama export and import (checkpoint/hf_llama.h): LlamaForCausalLM's names as rows
// of weft's tensors, config.json, the round trip weft -> HF -> weft bit-exact for grouped-,
// multi- and multi-head attention, tied and untied, with and without biases; which models have an
// architecture at all; every problem of a foreign directory named; and a Llama written apart from
// weft (hf_standalone_llama.py: numpy, float64, its own safetensors parser) computing weft's
// logits from the export.

#include "weft/checkpoint/hf_llama.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/safetensors_copy.h"
#include "data/temp_dir.h"
#include "weft/checkpoint/checkpoint.h"
#include "weft/checkpoint/hf_gpt2.h"
#include "weft/checkpoint/safetensors.h"
#include "weft/core/pending_file.h"
#include "weft/core/rng.h"
#include "weft/model/gpt.h"
#include "weft/model/param_layout.h"

namespace weft::checkpoint {
namespace {

using weft::testing::TempDir;

// Llama's choices at test size: 4 query heads of 16 sharing 2 key/value heads, F = 96, untied,
// no biases; a vocabulary of 61 padded to 64.
model::GptConfig tiny_llama() {
  model::GptConfig c;
  c.name = "tiny-llama";
  c.n_layer = 2;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.ffn_hidden_size = 96;
  c.vocab_size = 61;
  c.pad_vocab_to = 16;
  c.max_seq_len = 16;
  c.position = model::Position::Rope;
  c.rope_theta = 10000.0f;
  c.norm = model::NormKind::RMSNorm;
  c.mlp = model::MlpKind::SwiGLU;
  c.tie_embeddings = false;
  c.bias = false;
  return c;
}

// Multi-query attention, tied embeddings, biases, Llama 3's base and a smaller epsilon.
model::GptConfig tiny_mqa() {
  model::GptConfig c = tiny_llama();
  c.name = "tiny-mqa";
  c.n_kv_head = 1;
  c.tie_embeddings = true;
  c.bias = true;
  c.rope_theta = 500000.0f;
  c.norm_eps = 1e-6f;
  return c;
}

// One key/value head per query head (n_kv_head 0), untied, biases.
model::GptConfig tiny_mha() {
  model::GptConfig c = tiny_llama();
  c.name = "tiny-mha";
  c.n_kv_head = 0;
  c.bias = true;
  return c;
}

// Parameters large enough that attention is far from uniform (a misplaced rotation or head shows
// in the logits): matrices N(0, 0.1), norm weights 1 + N(0, 0.1), biases N(0, 0.1); the
// vocabulary's padding rows zero.
FlatBuffer random_params(const model::GptConfig& cfg, uint64_t seed) {
  const auto layout = model::gpt_param_layout(cfg);
  FlatBuffer p(layout.buffer);
  model::init_params(p, layout, seed);
  for (size_t i = 0; i < layout.buffer.slices().size(); ++i) {
    const SliceSpec& s = layout.buffer.slices()[i];
    float* x = p.data() + s.offset;
    switch (layout.init[i].kind) {
      case model::ParamInit::Kind::Normal:
        for (int64_t j = 0; j < s.numel; ++j) x[j] *= 0.1f / layout.init[i].std;
        break;
      case model::ParamInit::Kind::Ones:
      case model::ParamInit::Kind::Zeros:
        for (int64_t j = 0; j < s.numel; ++j) {
          x[j] += 0.1f * normal_at(stream_key(seed, s.name), static_cast<uint64_t>(j));
        }
        break;
    }
  }
  return p;
}

bool same_params(const FlatBuffer& a, const FlatBuffer& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

std::string save_checkpoint(const std::string& root, const model::GptConfig& cfg,
                            const FlatBuffer& params) {
  TrainState st;
  st.step = 7;
  st.tokenizer = "none";
  return save(root, cfg, params, nullptr, st).value_or_throw("save");
}

std::vector<std::string> names(const std::vector<HfPart>& parts) {
  std::vector<std::string> out;
  for (const HfPart& p : parts) out.push_back(p.name);
  return out;
}

TEST(HfLlama, PartsAreLlamaForCausalLMsTensorsInWeftsRowOrder) {
  const model::GptConfig c = tiny_llama();
  using V = std::vector<std::string>;
  EXPECT_EQ(names(hf_llama_parts(c, "h.1.attn.qkv.weight")),
            (V{"model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
               "model.layers.1.self_attn.v_proj.weight"}));
  const auto qkv = hf_llama_parts(c, "h.1.attn.qkv.weight");
  EXPECT_EQ(qkv[0].shape, (Shape{64, 64}));
  EXPECT_EQ(qkv[1].shape, (Shape{32, 64}));  // 2 key/value heads of 16
  EXPECT_EQ(qkv[2].shape, (Shape{32, 64}));
  EXPECT_EQ(names(hf_llama_parts(c, "h.0.mlp.fc.weight")),
            (V{"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"}));
  EXPECT_EQ(hf_llama_parts(c, "h.0.mlp.proj.weight")[0].shape, (Shape{64, 96}));
  EXPECT_EQ(names(hf_llama_parts(c, "h.0.attn.proj.weight")),
            (V{"model.layers.0.self_attn.o_proj.weight"}));
  EXPECT_EQ(names(hf_llama_parts(c, "h.12.ln_1.weight")),
            (V{"model.layers.12.input_layernorm.weight"}));
  EXPECT_EQ(names(hf_llama_parts(c, "h.0.ln_2.weight")),
            (V{"model.layers.0.post_attention_layernorm.weight"}));
  EXPECT_EQ(names(hf_llama_parts(c, "ln_f.weight")), (V{"model.norm.weight"}));
  EXPECT_EQ(hf_llama_parts(c, "wte")[0].shape, (Shape{61, 64}));  // without the padding rows
  EXPECT_EQ(names(hf_llama_parts(c, "lm_head")), (V{"lm_head.weight"}));
  EXPECT_THROW(hf_llama_parts(c, "h.0.attn.qkv.bias"), Error);  // bias = false
  EXPECT_THROW(hf_llama_parts(c, "wpe"), Error);
  EXPECT_THROW(hf_llama_parts(tiny_mqa(), "lm_head"), Error);  // tied
  EXPECT_EQ(names(hf_llama_parts(tiny_mqa(), "h.0.mlp.proj.bias")),
            (V{"model.layers.0.mlp.down_proj.bias"}));
}

TEST(HfLlama, ConfigJsonIsALlamaConfigThatReadsBackAsTheModel) {
  const auto j = hf_llama_config(tiny_llama(), std::nullopt);
  EXPECT_EQ(j["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["hidden_size"], 64);
  EXPECT_EQ(j["intermediate_size"], 96);
  EXPECT_EQ(j["num_attention_heads"], 4);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["num_hidden_layers"], 2);
  EXPECT_EQ(j["head_dim"], 16);
  EXPECT_EQ(j["vocab_size"], 61);  // the real vocabulary, not the padded 64
  EXPECT_EQ(j["max_position_embeddings"], 16);
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["rms_norm_eps"], 1e-5);  // the float's shortest decimal, not 9.99999974737875e-06
  EXPECT_EQ(j["rope_theta"], 10000.0);
  EXPECT_TRUE(j["rope_scaling"].is_null());
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["attention_bias"], false);
  EXPECT_EQ(j["mlp_bias"], false);
  EXPECT_EQ(j["torch_dtype"], "float32");
  EXPECT_FALSE(j.contains("eos_token_id"));
  EXPECT_EQ(hf_llama_config(tiny_llama(), 60)["bos_token_id"], 60);
  for (const model::GptConfig& c : {tiny_llama(), tiny_mqa(), tiny_mha()}) {
    auto back = llama_config_from_hf(nlohmann::json::parse(hf_llama_config(c, 3).dump()),
                                     "config.json", c.name, c.pad_vocab_to);
    ASSERT_TRUE(back.ok()) << back.status().message();
    const model::GptConfig& b = back.value();
    EXPECT_EQ(b.n_layer, c.n_layer);
    EXPECT_EQ(b.n_embd, c.n_embd);
    EXPECT_EQ(b.n_head, c.n_head);
    EXPECT_EQ(b.n_kv_head, c.n_kv_head);
    EXPECT_EQ(b.ffn_hidden_size, c.ffn_hidden_size);
    EXPECT_EQ(b.vocab_size, c.vocab_size);
    EXPECT_EQ(b.padded_vocab(), c.padded_vocab());
    EXPECT_EQ(b.max_seq_len, c.max_seq_len);
    EXPECT_EQ(b.position, c.position);
    EXPECT_EQ(b.norm, c.norm);
    EXPECT_EQ(b.mlp, c.mlp);
    EXPECT_EQ(b.tie_embeddings, c.tie_embeddings);
    EXPECT_EQ(b.bias, c.bias);
    EXPECT_EQ(std::memcmp(&b.norm_eps, &c.norm_eps, sizeof(float)), 0) << b.norm_eps;
    EXPECT_EQ(std::memcmp(&b.rope_theta, &c.rope_theta, sizeof(float)), 0) << b.rope_theta;
  }
}

TEST(HfLlama, AConfigOfAModelWeftDoesNotComputeListsEveryProblem) {
  auto j = nlohmann::json::parse(hf_llama_config(tiny_llama(), std::nullopt).dump());
  j["hidden_act"] = "gelu";
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  j["head_dim"] = 32;
  j["mlp_bias"] = true;
  j["pretraining_tp"] = 2;
  j.erase("intermediate_size");
  auto r = llama_config_from_hf(j, "in/config.json", "x", 128);
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  for (const char* want :
       {"in/config.json: hidden_act=\"gelu\" is not supported", "rope_scaling={",
        "head_dim=32 is not supported", "attention_bias=false with mlp_bias=true",
        "pretraining_tp=2", "intermediate_size is missing"}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  }
  j = nlohmann::json::parse(hf_llama_config(tiny_llama(), std::nullopt).dump());
  j["num_key_value_heads"] = 3;  // 4 query heads do not split into groups of 3
  r = llama_config_from_hf(j, "in/config.json", "x", 128);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("in/config.json: n_head=4 is not a multiple of n_kv_head=3"),
            std::string::npos)
      << r.status().message();
  // LlamaConfig's defaults for what is absent: eps 1e-6, theta 10000, untied, no biases, as many
  // key/value heads as query heads.
  for (const char* key : {"rms_norm_eps", "rope_theta", "tie_word_embeddings", "attention_bias",
                          "mlp_bias", "num_key_value_heads"}) {
    j.erase(key);
  }
  r = llama_config_from_hf(j, "c", "x", 128);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().norm_eps, 1e-6f);
  EXPECT_EQ(r.value().rope_theta, 10000.0f);
  EXPECT_EQ(r.value().kv_heads(), 4);
  EXPECT_FALSE(r.value().tie_embeddings || r.value().bias);
  j["model_type"] = "gpt2";
  EXPECT_NE(llama_config_from_hf(j, "c", "x", 128).status().message().find("not \"llama\""),
            std::string::npos);
}

TEST(HfLlama, AModelHasAnArchitectureOnlyWithEveryChoiceOfOne) {
  EXPECT_EQ(hf_architecture(tiny_llama()).value(), HfArchitecture::Llama);
  EXPECT_EQ(hf_architecture(tiny_mqa()).value(), HfArchitecture::Llama);
  model::GptConfig gpt2 = tiny_llama();
  gpt2.position = model::Position::Learned;
  gpt2.norm = model::NormKind::LayerNorm;
  gpt2.mlp = model::MlpKind::Gelu;
  gpt2.n_kv_head = 0;
  gpt2.ffn_hidden_size = 0;
  gpt2.tie_embeddings = true;
  gpt2.bias = true;
  EXPECT_EQ(hf_architecture(gpt2).value(), HfArchitecture::Gpt2);
  // Rotary positions in a GPT-2 otherwise: neither holds it, and the error says why for each.
  model::GptConfig mixed = gpt2;
  mixed.position = model::Position::Rope;
  mixed.n_kv_head = 2;
  auto r = hf_architecture(mixed);
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  for (const char* want :
       {"GPT2LMHeadModel cannot hold position=rope",
        "n_kv_head=2 (one key/value head per query "
        "head)",
        "LlamaForCausalLM cannot hold norm=layernorm (its norms are RMSNorms), mlp=gelu"}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  }
  // And the export refuses it before writing anything.
  TempDir dir;
  save_checkpoint(dir.path("run"), mixed, random_params(mixed, 1));
  auto e = export_hf(dir.path("run"), dir.path("hf"));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("LlamaForCausalLM cannot hold"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.path("hf")));
  // The writers refuse the other's models.
  EXPECT_FALSE(
      write_hf_gpt2(dir.path("x"), tiny_llama(), random_params(tiny_llama(), 1), std::nullopt)
          .ok());
}

TEST(HfLlama, ExportThenImportIsBitExact) {
  for (const model::GptConfig& cfg : {tiny_llama(), tiny_mqa(), tiny_mha()}) {
    SCOPED_TRACE(cfg.name);
    TempDir dir;
    const FlatBuffer params = random_params(cfg, 5);
    save_checkpoint(dir.path("run"), cfg, params);
    auto arch = export_hf(dir.path("run"), dir.path("hf"));
    ASSERT_TRUE(arch.ok()) << arch.status().message();
    EXPECT_EQ(arch.value(), HfArchitecture::Llama);

    // The exported tensors, directly: k_proj is the rows of attn.qkv after q's, as they are.
    auto st = SafetensorsReader::open(dir.path("hf/model.safetensors")).value_or_throw("open");
    const int64_t per_layer = 2 + 4 + 3 + (cfg.bias ? 4 + 3 : 0);
    EXPECT_EQ(st.header().tensors.size(),
              static_cast<size_t>(2 * per_layer + 2 + (cfg.tie_embeddings ? 0 : 1)));
    const SafetensorsTensor* k = st.header().find("model.layers.1.self_attn.k_proj.weight");
    ASSERT_NE(k, nullptr);
    const int64_t kv_rows = int64_t{cfg.kv_heads()} * cfg.head_size();
    ASSERT_EQ(k->shape, (Shape{kv_rows, 64}));
    std::vector<float> w(static_cast<size_t>(kv_rows * 64));
    ASSERT_TRUE(st.read(*k, w.data()).ok());
    EXPECT_EQ(std::memcmp(w.data(), params.ptr("h.1.attn.qkv.weight") + 64 * 64, w.size() * 4), 0);
    EXPECT_EQ(st.header().find("lm_head.weight") == nullptr, cfg.tie_embeddings);

    auto out = import_hf(dir.path("hf"), dir.path("imported"));
    ASSERT_TRUE(out.ok()) << out.status().message();
    const Metadata md = read_metadata(out.value()).value_or_throw("metadata");
    // The config, key for key as the checkpoint writes it, and every parameter bit.
    EXPECT_EQ(config_to_json(md.model).dump(), config_to_json(cfg).dump());
    EXPECT_FALSE(md.has_optimizer);
    FlatBuffer back(model::gpt_param_layout(md.model).buffer);
    ASSERT_TRUE(load(out.value(), cfg, back, nullptr, nullptr).ok());
    EXPECT_TRUE(same_params(back, params));
  }
}

TEST(HfLlama, AnImportOfAnIncompleteOrForeignFileNamesEveryProblem) {
  TempDir dir;
  const model::GptConfig cfg = tiny_mqa();  // tied
  FlatBuffer params = random_params(cfg, 2);
  ASSERT_TRUE(write_hf_llama(dir.path("hf"), cfg, params, std::nullopt).ok());
  const auto copy = test::read_safetensors_copy(dir.path("hf/model.safetensors"));
  std::vector<SafetensorsInput> in;
  for (SafetensorsInput t : copy.inputs()) {
    if (t.name == "model.layers.0.mlp.up_proj.weight") continue;                 // missing
    if (t.name == "model.layers.1.self_attn.v_proj.weight") t.shape = {64, 16};  // transposed
    in.push_back(t);
  }
  std::vector<float> extra(64, 1.0f), head(61 * 64, 0.5f);
  in.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {8}, extra.data()});  // skipped
  in.push_back({"model.layers.0.mlp.extra.weight", {64}, extra.data()});
  ASSERT_TRUE(write_safetensors(dir.path("hf/model.safetensors"), in, {{"format", "pt"}}).ok());
  auto m = read_hf_llama(dir.path("hf"));
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  const std::string file = dir.path("hf") + "/model.safetensors";
  for (const std::string& want :
       {file + ": tensor 'model.layers.0.mlp.up_proj.weight' is missing (weft's h.0.mlp.fc.weight)",
        file + ": tensor 'model.layers.1.self_attn.v_proj.weight' has shape [64, 16]; config.json "
               "says [16, 64]",
        file + ": tensor 'model.layers.0.mlp.extra.weight' is not a parameter"}) {
    EXPECT_NE(msg.find(want), std::string::npos) << want << "\n" << msg;
  }
  EXPECT_EQ(msg.find("inv_freq"), std::string::npos) << msg;
  // A tied export that carries lm_head.weight: accepted when it is the embedding, else refused.
  in = copy.inputs();
  in.push_back({"lm_head.weight", {61, 64}, head.data()});
  ASSERT_TRUE(write_safetensors(dir.path("hf/model.safetensors"), in, {{"format", "pt"}}).ok());
  m = read_hf_llama(dir.path("hf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("lm_head.weight differs from model.embed_tokens.weight"),
            std::string::npos)
      << m.status().message();
  std::memcpy(head.data(), params.ptr("wte"), head.size() * sizeof(float));
  ASSERT_TRUE(write_safetensors(dir.path("hf/model.safetensors"), in, {{"format", "pt"}}).ok());
  HfImportOptions o;
  o.pad_vocab_to = cfg.pad_vocab_to;  // the rewritten file has no weft metadata
  m = read_hf_llama(dir.path("hf"), o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(same_params(m.value().params, params));
}

// weft's logits for `ids` on the checkpoint's model (host fp32), the first V columns of each row.
std::vector<float> weft_logits(const std::string& ckpt, const model::GptConfig& cfg,
                               const std::vector<int32_t>& ids) {
  const int T = static_cast<int>(ids.size());
  model::Gpt gpt(cfg, 1, T);
  EXPECT_TRUE(load(ckpt, cfg, gpt.params(), nullptr, nullptr).ok());
  gpt.forward(ids.data(), nullptr, 1, T);
  std::vector<float> out;
  for (int t = 0; t < T; ++t) {
    const float* row = gpt.logits() + int64_t{t} * cfg.padded_vocab();
    out.insert(out.end(), row, row + cfg.vocab_size);
  }
  return out;
}

// numpy is a required oracle, as python3-torch is for model_torch_reference_test: without it this
// test fails rather than skipping (a skip reads "Passed" in ctest).
TEST(HfLlama, AnIndependentLlamaComputesWeftsLogitsFromTheExport) {
  const std::string python = WEFT_TORCH_PYTHON;
  ASSERT_EQ(std::system((python + " -c 'import numpy' >/dev/null 2>&1").c_str()), 0)
      << python << " has no numpy: install Debian's python3-numpy (scripts/bootstrap.sh)";
  for (const model::GptConfig& cfg : {tiny_llama(), tiny_mqa(), tiny_mha()}) {
    SCOPED_TRACE(cfg.name);
    TempDir dir;
    const std::string ckpt = save_checkpoint(dir.path("run"), cfg, random_params(cfg, 3));
    ASSERT_TRUE(export_hf(ckpt, dir.path("hf")).ok());
    std::vector<int32_t> ids;
    std::string ids_text;
    for (int t = 0; t < cfg.max_seq_len; ++t) {
      ids.push_back((t * 37 + 11) % cfg.vocab_size);
      ids_text += (t ? "," : "") + std::to_string(ids.back());
    }
    const std::vector<float> logits = weft_logits(ckpt, cfg, ids);
    weft::testing::write_file(
        dir.path("logits.f32"),
        std::string(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float)));
    const std::string cmd = python + " " + WEFT_HF_LLAMA_READER + " " + dir.path("hf") + " " +
                            ids_text + " " + dir.path("logits.f32") + " > " + dir.path("log") +
                            " 2>&1";
    const int rc = std::system(cmd.c_str());
    const std::string log = weft::testing::read_file(dir.path("log"));
    EXPECT_EQ(rc, 0) << log;
    std::printf("%s: %s", cfg.name.c_str(), log.c_str());
  }
}

}  // namespace
}  // namespace weft::checkpoint
