// The Llama-3 presets (configs/models/llama3-8b.toml, llama3-70b.toml): the model's own layout
// counts Meta's published parameters, the FLOPs per token are 6N plus attention (Kaplan et al.
// 2020's estimate, N without the embedding table), and both plan on the dgx-h100 and h200 presets
// in bf16 at a Llama-3-like batch of 8192-token sequences.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "planner/test_paths.h"
#include "weft/model/flops.h"
#include "weft/model/param_layout.h"
#include "weft/planner/comm_volume.h"
#include "weft/planner/hardware.h"
#include "weft/planner/search.h"

namespace weft::planner {
namespace {

model::GptConfig preset(const char* name) {
  return model::load_gpt_config(test::source_path(fmt::format("configs/models/{}.toml", name)))
      .value_or_throw(name);
}

TEST(Llama3Presets, CountMetasParameters) {
  // The released checkpoints' totals (sum of their tensors' sizes): 8.03B and 70.6B.
  for (const auto& [name, want] : {std::pair{"llama3-8b", int64_t{8'030'261'248}},
                                   std::pair{"llama3-70b", int64_t{70'553'706'496}}}) {
    const model::GptConfig m = preset(name);
    EXPECT_TRUE(m.rope() && m.rms_norm() && m.mlp == model::MlpKind::SwiGLU);
    EXPECT_FALSE(m.tie_embeddings || m.bias);
    EXPECT_EQ(m.padded_vocab(), m.vocab_size) << name << ": 128256 is a multiple of 128";
    EXPECT_EQ(model::gpt_param_layout(m).count(), want) << name;
    EXPECT_EQ(local_parameters(m, {}, 0), want) << name;
    // Split by a pipeline, the ranks hold every parameter once: no tied copy on the last.
    const layout::Layout c{.tp = 8, .pp = 4};
    int64_t sum = 0;
    for (int r = 0; r < c.pp; ++r) sum += local_parameters(m, c, r);
    // tp = 8 splits all but the norms (2 per layer and the final one, C each), which every tp
    // rank holds whole.
    const int64_t norms = (2 * int64_t{m.n_layer} + 1) * m.n_embd;
    EXPECT_EQ(sum * c.tp - (c.tp - 1) * norms, want) << name;
  }
}

TEST(Llama3Presets, FlopsPerTokenAreSixNPlusAttention) {
  for (const char* name : {"llama3-8b", "llama3-70b"}) {
    const model::GptConfig m = preset(name);
    const double s = m.max_seq_len, l = m.n_layer, h = m.n_embd;
    const double N = static_cast<double>(model::gpt_param_layout(m).count());
    // N without the input embedding (a lookup, no FLOPs); the LM head is a GEMM and stays in.
    const double N_gemm = N - static_cast<double>(m.vocab_size) * h;
    const double per_token = model::model_flops_per_step(m, 1, s) / s;
    // 6N + 12 l s h (Eq. 3's attention: scores and context over all s keys, forward and
    // backward); the norms' weights are in N but do no GEMM: 6 (2l + 1) h, a 3e-5 share.
    const double norms = 6 * (2 * l + 1) * h;
    EXPECT_NEAR(per_token, 6 * N_gemm + 12 * l * s * h - norms, 1e-9 * per_token) << name;
    EXPECT_NEAR(per_token / (6 * N_gemm + 12 * l * s * h), 1.0, 1e-4) << name;
    fmt::print("{}: {} parameters, {:.4g} FLOPs per token at s = {} (6N = {:.4g})\n", name,
               static_cast<int64_t>(N), per_token, m.max_seq_len, 6 * N);
  }
}

TEST(Llama3Presets, PlanOnDgxH100AndH200) {
  struct Case {
    const char* model;
    int gpus, global_batch;
  };
  // Llama 3 trained on 16M-token batches; smaller worlds keep the search quick.
  for (const Case& k : {Case{"llama3-8b", 64, 512}, Case{"llama3-70b", 512, 1024}}) {
    for (const char* cluster_name : {"dgx-h100", "h200"}) {
      const Cluster cluster =
          load_cluster(test::source_path(fmt::format("configs/clusters/{}.toml", cluster_name)))
              .value_or_throw(cluster_name);
      Job job;
      job.model = preset(k.model);
      job.seq_len = 8192;
      job.global_batch = k.global_batch;
      job.world = k.gpus;
      job.precision = Precision::BF16Mixed;
      const SearchResult r = search(cluster, job, SearchSpace{}, 3);
      ASSERT_FALSE(r.ranked.empty()) << k.model << " on " << cluster_name;
      const Prediction& best = r.ranked.front();
      EXPECT_TRUE(best.feasible);
      // Every rank splits whole key/value heads (8 of them): tp divides 8.
      EXPECT_EQ(job.model.kv_heads() % best.config.tp, 0) << short_name(best.config);
      EXPECT_LE(best.memory.total(), cluster.usable_memory());
      // A sane prediction: 20-75% of the bf16 peak (Meta reports 38-43% for Llama 3 405B).
      EXPECT_GT(best.mfu, 0.2) << short_name(best.config);
      EXPECT_LT(best.mfu, 0.75) << short_name(best.config);
      fmt::print(
          "{} on {} x {}: {} feasible of {}; best {}: {:.3f} s/step, MFU {:.1f}%, {:.1f} GiB\n",
          k.model, k.gpus, cluster_name, r.feasible, r.candidates, short_name(best.config),
          best.time.total, 100 * best.mfu, best.memory.total() / (1024.0 * 1024 * 1024));
    }
  }
}

}  // namespace
}  // namespace weft::planner
