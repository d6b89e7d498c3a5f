// Hugging Face GPT-2 export and import: the name and layout mapping, config.json, a weft checkpoint
// exported and imported again holds identical parameters, an HF file with GPT2Model's names (no
// "transformer."), mask buffers and F16 weights imports, every problem of an HF directory is named,
// and an independent reader (Debian's python3-torch, required: the test fails without it) finds
// GPT2LMHeadModel's names, shapes and values, and the same logits.

#include "weft/checkpoint/hf_gpt2.h"
#include "support/tiny_gpt.h"

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
#include "weft/checkpoint/safetensors.h"
#include "weft/core/dtype.h"
#include "weft/core/pending_file.h"
#include "weft/core/rng.h"
#include "weft/model/param_layout.h"

namespace weft::checkpoint {
namespace {

using weft::testing::TempDir;

model::GptConfig tiny() { return test::tiny_gpt(2, 32); }  // vocabulary 61 padded to 64

// Parameters with every element distinct-ish (biases and LayerNorms too), padding rows zero.
FlatBuffer random_params(const model::GptConfig& cfg, uint64_t seed) {
  const auto layout = model::gpt_param_layout(cfg);
  FlatBuffer p(layout.buffer);
  model::init_params(p, layout, seed);
  for (size_t i = 0; i < layout.buffer.slices().size(); ++i) {
    const SliceSpec& s = layout.buffer.slices()[i];
    if (layout.init[i].kind == model::ParamInit::Kind::Normal) continue;
    fill_normal(p.data() + s.offset, s.numel, stream_key(seed, s.name), 0, 0.0f, 0.1f);
  }
  return p;
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

bool same_params(const FlatBuffer& a, const FlatBuffer& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

std::string save_checkpoint(const std::string& root, const model::GptConfig& cfg,
                            const FlatBuffer& params, const std::string& tokenizer = "none") {
  TrainState st;
  st.step = 12;
  st.tokenizer = tokenizer;
  return save(root, cfg, params, nullptr, st).value_or_throw("save");
}

TEST(HfGpt2, NamesAreTransformersGpt2LMHeadModelsWithConv1DWeightsTransposed) {
  EXPECT_EQ(hf_gpt2_name("wte").name, "transformer.wte.weight");
  EXPECT_EQ(hf_gpt2_name("wpe").name, "transformer.wpe.weight");
  EXPECT_EQ(hf_gpt2_name("ln_f.bias").name, "transformer.ln_f.bias");
  EXPECT_EQ(hf_gpt2_name("h.11.ln_1.weight").name, "transformer.h.11.ln_1.weight");
  const HfPart qkv = hf_gpt2_name("h.3.attn.qkv.weight");
  EXPECT_EQ(qkv.name, "transformer.h.3.attn.c_attn.weight");
  EXPECT_TRUE(qkv.transposed);
  EXPECT_FALSE(hf_gpt2_name("h.3.attn.qkv.bias").transposed);
  EXPECT_EQ(hf_gpt2_name("h.0.attn.proj.weight").name, "transformer.h.0.attn.c_proj.weight");
  EXPECT_EQ(hf_gpt2_name("h.0.mlp.fc.bias").name, "transformer.h.0.mlp.c_fc.bias");
  EXPECT_TRUE(hf_gpt2_name("h.0.mlp.proj.weight").transposed);
  EXPECT_THROW(hf_gpt2_name("lm_head"), Error);
}

TEST(HfGpt2, ConfigJsonIsAGpt2ConfigThatReadsBackAsTheModel) {
  const auto j = hf_gpt2_config(tiny(), std::nullopt);
  EXPECT_EQ(j["model_type"], "gpt2");
  EXPECT_EQ(j["architectures"], nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(j["vocab_size"], 61);
  EXPECT_EQ(j["n_positions"], 16);
  EXPECT_EQ(j["n_embd"], 32);
  EXPECT_EQ(j["n_layer"], 2);
  EXPECT_EQ(j["n_head"], 4);
  EXPECT_TRUE(j["n_inner"].is_null());
  EXPECT_EQ(j["activation_function"], "gelu_new");
  EXPECT_EQ(j["layer_norm_epsilon"], 1e-5);
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_FALSE(j.contains("eos_token_id"));
  EXPECT_EQ(hf_gpt2_config(tiny(), 50256)["eos_token_id"], 50256);
  auto back = gpt_config_from_hf(nlohmann::json::parse(j.dump()), "config.json", "tiny", 16);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back.value().n_layer, 2);
  EXPECT_EQ(back.value().max_seq_len, 16);
  EXPECT_EQ(back.value().padded_vocab(), 64);
}

TEST(HfGpt2, AConfigOfAModelWeftDoesNotComputeListsEveryProblem) {
  auto j = nlohmann::json::parse(hf_gpt2_config(tiny(), std::nullopt).dump());
  j["activation_function"] = "relu";
  j["n_inner"] = 100;
  j["layer_norm_epsilon"] = 1e-6;
  j["tie_word_embeddings"] = false;
  j["n_head"] = 5;
  j.erase("n_layer");
  auto r = gpt_config_from_hf(j, "in/config.json", "x", 128);
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  for (const char* want : {"in/config.json: activation_function=\"relu\" is not supported",
                           "n_inner=100 is not supported", "layer_norm_epsilon=1e-06",
                           "tie_word_embeddings=false", "n_layer is missing"}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  }
  j = nlohmann::json::parse(hf_gpt2_config(tiny(), std::nullopt).dump());
  j["n_head"] = 5;  // 32 is not divisible by 5
  r = gpt_config_from_hf(j, "in/config.json", "x", 128);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("in/config.json: n_embd=32 is not divisible by n_head=5"),
            std::string::npos)
      << r.status().message();
  j["model_type"] = "llama";
  EXPECT_NE(gpt_config_from_hf(j, "c", "x", 128).status().message().find("not \"gpt2\""),
            std::string::npos);
}

TEST(HfGpt2, ExportThenImportGivesIdenticalParameters) {
  TempDir dir;
  const model::GptConfig cfg = tiny();
  const FlatBuffer params = random_params(cfg, 5);
  const std::string ckpt = save_checkpoint(dir.path("run"), cfg, params);
  ASSERT_TRUE(export_hf(dir.path("run"), dir.path("hf")).ok());
  EXPECT_EQ(files_in(dir.path("hf")), (std::set<std::string>{"config.json", "model.safetensors"}));

  // The exported tensors, directly: wte without its padding rows, c_attn transposed.
  auto st = SafetensorsReader::open(dir.path("hf/model.safetensors")).value_or_throw("open");
  EXPECT_EQ(st.header().tensors.size(), 4u + 12u * 2u);
  EXPECT_EQ(st.header().metadata.at("format"), "pt");
  const SafetensorsTensor* wte = st.header().find("transformer.wte.weight");
  ASSERT_NE(wte, nullptr);
  EXPECT_EQ(wte->shape, (Shape{61, 32}));
  const SafetensorsTensor* c_attn = st.header().find("transformer.h.1.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  ASSERT_EQ(c_attn->shape, (Shape{32, 96}));
  std::vector<float> w(32 * 96);
  ASSERT_TRUE(st.read(*c_attn, w.data()).ok());
  const float* qkv = params.ptr("h.1.attn.qkv.weight");  // [96, 32]
  for (int i = 0; i < 32; ++i) {
    for (int o = 0; o < 96; ++o) ASSERT_EQ(w[i * 96 + o], qkv[o * 32 + i]) << i << "," << o;
  }

  auto out = import_hf(dir.path("hf"), dir.path("imported"));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out.value(), dir.path("imported") + "/step_00000000");
  const Metadata md = read_metadata(out.value()).value_or_throw("metadata");
  EXPECT_EQ(md.model.name, tiny().name);  // from the export's metadata
  EXPECT_EQ(md.model.pad_vocab_to, 16);
  EXPECT_FALSE(md.has_optimizer);
  EXPECT_EQ(md.train.tokenizer, "none");
  FlatBuffer back(model::gpt_param_layout(md.model).buffer);
  ASSERT_TRUE(load(out.value(), cfg, back, nullptr, nullptr).ok());
  EXPECT_TRUE(same_params(back, params));
}

// Writes IN/config.json and IN/model.safetensors as transformers' GPT2Model would (no
// "transformer." prefix), in F16, with the attention-mask buffers of old exports; returns the
// parameters rounded to F16 as weft's serial layout.
FlatBuffer write_hf_dir(const std::string& in, const model::GptConfig& cfg,
                        std::vector<std::string> drop = {},
                        std::map<std::string, Shape> reshape = {}) {
  std::filesystem::create_directories(in);
  EXPECT_TRUE(
      write_file_atomic(in + "/config.json", hf_gpt2_config(cfg, std::nullopt).dump()).ok());
  FlatBuffer params = random_params(cfg, 9);
  // The file: a header written here (F16), the buffer after it.
  nlohmann::ordered_json header;
  std::string buffer;
  auto add = [&](const std::string& name, const std::string& dtype, const Shape& shape,
                 const std::string& bytes) {
    header[name] = {{"dtype", dtype},
                    {"shape", shape},
                    {"data_offsets", {buffer.size(), buffer.size() + bytes.size()}}};
    buffer += bytes;
  };
  for (const SliceSpec& s : params.layout().slices()) {
    float* p = params.data() + s.offset;
    const HfPart hf = hf_gpt2_name(s.name);
    const std::string name = hf.name.substr(std::strlen("transformer."));
    if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
    Shape shape = s.shape;
    int64_t n = s.numel;
    if (s.name == "wte") {
      shape = {cfg.vocab_size, cfg.n_embd};
      n = numel(shape);
    }
    std::vector<uint16_t> half(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      half[i] = F16::from_float(p[i]).bits;
      p[i] = F16{half[i]}.to_float();  // what the import must give back
    }
    if (hf.transposed) {
      std::vector<uint16_t> t(half.size());
      for (int64_t r = 0; r < s.shape[0]; ++r) {
        for (int64_t k = 0; k < s.shape[1]; ++k) t[k * s.shape[0] + r] = half[r * s.shape[1] + k];
      }
      half = t;
      shape = {s.shape[1], s.shape[0]};
    }
    if (reshape.count(name)) shape = reshape[name];
    add(name, "F16", shape,
        std::string(reinterpret_cast<const char*>(half.data()), half.size() * 2));
    if (s.name.ends_with("attn.qkv.bias")) {  // the causal-mask buffers, which are not parameters
      const std::string layer = name.substr(0, name.find(".attn."));
      add(layer + ".attn.bias", "U8", {1, 1, 2, 2}, std::string(4, '\1'));
      add(layer + ".attn.masked_bias", "F32", {}, std::string(4, '\0'));
    }
  }
  std::string text = header.dump();
  std::string file(8, '\0');
  const uint64_t len = text.size();
  std::memcpy(file.data(), &len, 8);
  weft::testing::write_file(in + "/model.safetensors", file + text + buffer);
  return params;
}

TEST(HfGpt2, ImportReadsGpt2ModelNamesHalfPrecisionAndSkipsMaskBuffers) {
  TempDir dir;
  const model::GptConfig cfg = tiny();
  const FlatBuffer want = write_hf_dir(dir.path("gpt2-tiny"), cfg);
  HfImportOptions o;
  o.pad_vocab_to = 16;
  auto m = read_hf_gpt2(dir.path("gpt2-tiny") + "/", o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m.value().config.name, "gpt2-tiny");  // the directory's name
  EXPECT_TRUE(same_params(m.value().params, want));
  // The default padding is GptConfig's (128): the same values, more zero rows.
  auto padded = read_hf_gpt2(dir.path("gpt2-tiny"));
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(padded.value().config.padded_vocab(), 128);
  EXPECT_EQ(std::memcmp(padded.value().params.ptr("h.0.ln_1.weight"), want.ptr("h.0.ln_1.weight"),
                        32 * sizeof(float)),
            0);
}

TEST(HfGpt2, AnImportOfAnIncompleteOrForeignFileNamesEveryProblem) {
  TempDir dir;
  write_hf_dir(dir.path("in"), tiny(), {"h.1.mlp.c_fc.bias"},
               {{"h.0.attn.c_attn.weight", {96, 32}}});
  auto m = read_hf_gpt2(dir.path("in"));
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  const std::string file = dir.path("in") + "/model.safetensors";
  EXPECT_NE(msg.find(file + ": tensor 'transformer.h.1.mlp.c_fc.bias' is missing"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(file + ": tensor 'h.0.attn.c_attn.weight' has shape [96, 32]; config.json "
                            "says [32, 96]"),
            std::string::npos)
      << msg;
  auto absent = read_hf_gpt2(dir.path("nothing"));
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("nothing/config.json: cannot open"), std::string::npos);
}

TEST(HfGpt2, ATensorThatIsNotGpt2OrAnUntiedHeadIsAnError) {
  TempDir dir;
  const model::GptConfig cfg = tiny();
  FlatBuffer params = random_params(cfg, 1);
  ASSERT_TRUE(write_hf_gpt2(dir.path("hf"), cfg, params, std::nullopt).ok());
  // Append tensors by rewriting the file with extra entries.
  const auto file = test::read_safetensors_copy(dir.path("hf/model.safetensors"));
  const auto& data = file.data;
  std::vector<SafetensorsInput> in = file.inputs();
  std::vector<float> head(61 * 32, 0.5f), extra(3, 1.0f);
  in.push_back({"lm_head.weight", {61, 32}, head.data()});
  in.push_back({"transformer.h.0.attn.rotary", {3}, extra.data()});
  ASSERT_TRUE(write_safetensors(dir.path("hf/model.safetensors"), in, {{"format", "pt"}}).ok());
  auto m = read_hf_gpt2(dir.path("hf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("tensor 'transformer.h.0.attn.rotary' is not a GPT-2 "
                                      "parameter"),
            std::string::npos)
      << m.status().message();
  in.pop_back();
  ASSERT_TRUE(write_safetensors(dir.path("hf/model.safetensors"), in, {{"format", "pt"}}).ok());
  m = read_hf_gpt2(dir.path("hf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("lm_head.weight differs from wte.weight"), std::string::npos)
      << m.status().message();
  // A head equal to wte is the tied one: accepted.
  std::memcpy(head.data(), data[0].data(), head.size() * sizeof(float));
  ASSERT_EQ(file.tensors[0].name, "transformer.wte.weight");
  ASSERT_TRUE(write_safetensors(dir.path("hf/model.safetensors"), in, {{"format", "pt"}}).ok());
  EXPECT_TRUE(read_hf_gpt2(dir.path("hf")).ok());
}

TEST(HfGpt2, ImportRefusesADirectoryThatAlreadyHoldsCheckpoints) {
  TempDir dir;
  const model::GptConfig cfg = tiny();
  save_checkpoint(dir.path("run"), cfg, random_params(cfg, 2));
  ASSERT_TRUE(export_hf(dir.path("run"), dir.path("hf")).ok());
  auto r = import_hf(dir.path("hf"), dir.path("run"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("already holds checkpoints"), std::string::npos);
  EXPECT_EQ(list_checkpoints(dir.path("run")).size(), 1u);
  EXPECT_EQ(list_checkpoints(dir.path("run"))[0].first, 12);
}

// PyTorch is a required oracle, as for model_torch_reference_test: without it this test fails
// rather than skipping, since a skip reads "Passed" in ctest and the check would silently not run.
TEST(HfGpt2, TorchReadsTheExportAsGpt2WithWeftsValuesAndLogits) {
  const std::string python = WEFT_TORCH_PYTHON;
  ASSERT_EQ(std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()), 0)
      << python << " has no torch: install Debian's python3-torch (scripts/bootstrap.sh) or "
      << "configure with -DWEFT_TORCH_PYTHON=<a python with torch>";
  TempDir dir;
  const model::GptConfig cfg = tiny();
  const std::string ckpt = save_checkpoint(dir.path("run"), cfg, random_params(cfg, 3), "gpt2");
  ASSERT_TRUE(export_hf(ckpt, dir.path("hf")).ok());
  const std::string cmd = python + " " + WEFT_HF_CHECK_SCRIPT + " " + dir.path("hf") + " " + ckpt +
                          " > " + dir.path("log") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << weft::testing::read_file(dir.path("log"));
}

}  // namespace
}  // namespace weft::checkpoint
