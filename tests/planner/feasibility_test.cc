// One truth for feasibility (issue #19): the planner never recommends a layout the trainer
// refuses. For every cluster preset in configs/clusters/ (the directory, not a list) and a
// representative model on it, the top 20 of `weft plan`'s search are each written as the RUN.toml
// a user would launch and put through the trainer's own validation: config::parse_run_config
// (every engine's rules), config::validate_layout for the engine `weft train` would run
// (--device cuda on a bf16 preset, the CPU on an fp32-only one) and the process grid.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "planner/test_paths.h"
#include "weft/config/run_config.h"
#include "weft/layout/validate.h"
#include "weft/model/gpt_config.h"
#include "weft/planner/hardware.h"
#include "weft/planner/search.h"
#include "weft/planner/stage_costs.h"
#include "weft/schedule/instr.h"

namespace weft::planner {
namespace {

constexpr int kTop = 20;

// The paper's sizes the planner's other tests use, and small ones that fit anywhere (on
// this-machine the large ones find nothing that fits and the small ones carry the check).
struct ModelCase {
  const char* path;
  int seq_len, global_batch, devices;  // devices: capped by the preset's size
};
constexpr ModelCase kModels[] = {
    {"configs/models/gpt-175b.toml", 2048, 1536, 1024},  // GPT-3, search_test's job
    {"configs/models/ptdp-1.7b.toml", 2048, 512, 32},    // the PTD-P paper's first row
    {"configs/models/gpt2-124m.toml", 1024, 32, 8},
    {"configs/models/llama3-8b.toml", 8192, 256, 64},  // the variants: tp must divide n_kv_head
    {"configs/models/tiny.toml", 16, 8, 2},
};

std::vector<std::filesystem::path> cluster_presets() {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(test::source_path("configs/clusters"))) {
    if (e.path().extension() == ".toml") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The RUN.toml that launches `c` for `job` (the data is never opened by the validation).
std::string run_toml(const Job& job, const layout::Layout& c) {
  const model::GptConfig& m = job.model;
  return fmt::format(
      "[model]\nname = \"{}\"\nn_layer = {}\nn_embd = {}\nn_head = {}\nvocab_size = {}\n"
      "pad_vocab_to = {}\nmax_seq_len = {}\nposition = \"{}\"\nrope_theta = {}\nnorm = \"{}\"\n"
      "norm_eps = {}\nmlp = \"{}\"\nffn_hidden_size = {}\nn_kv_head = {}\ntie_embeddings = {}\n"
      "bias = {}\n"
      "[data]\ntrain = \"unused\"\n"
      "[train]\nseq_len = {}\nmicro_batch = {}\nglobal_batch = {}\nsteps = 1\nrecompute = \"{}\"\n"
      "[parallel]\ntp = {}\npp = {}\ndp = {}\nvp = {}\nsequence_parallel = {}\nschedule = \"{}\"\n"
      "zero = {}\n",
      m.name, m.n_layer, m.n_embd, m.n_head, m.vocab_size, m.pad_vocab_to, m.max_seq_len,
      model::position_name(m.position), m.rope_theta, model::norm_name(m.norm), m.norm_eps,
      model::mlp_name(m.mlp), m.ffn_hidden_size, m.n_kv_head, m.tie_embeddings, m.bias, job.seq_len,
      c.micro_batch, job.global_batch, model::recompute_name(c.recompute), c.tp, c.pp, c.dp, c.vp,
      c.sequence_parallel ? "true" : "false", schedule::kind_name(c.schedule), c.zero);
}

// Every problem the trainer finds with `c` (empty: it accepts it).
std::string trainer_refusal(const Job& job, const layout::Layout& c) {
  auto cfg = config::parse_run_config(run_toml(job, c), "plan.toml");
  if (!cfg.ok()) return cfg.status().message();
  Status s = config::validate_layout(cfg.value());
  s.merge(config::validate_world(cfg.value(), job.world));
  return s.ok() ? "" : s.message();
}

TEST(Feasibility, TheTopTwentyOfEveryPresetAreLayoutsTheTrainerAccepts) {
  const auto presets = cluster_presets();
  ASSERT_GE(presets.size(), 2u);
  for (const auto& path : presets) {
    const Cluster cluster = load_cluster(path.string()).value();
    // The precision `weft plan` is asked for on this preset.
    const Precision precision =
        cluster.peak(NumberFormat::BF16) > 0 ? Precision::BF16Mixed : Precision::FP32;
    const int size = cluster.max_nodes > 0 ? cluster.max_nodes * cluster.devices_per_node : 1 << 20;
    int ranked = 0;
    for (const ModelCase& mc : kModels) {
      Job job;
      job.model = model::load_gpt_config(test::source_path(mc.path)).value();
      job.seq_len = mc.seq_len;
      job.global_batch = mc.global_batch;
      job.world = std::min(mc.devices, size);
      job.precision = precision;
      ASSERT_GT(compute_peak(cluster, precision), 0) << cluster.name;
      const SearchResult r = search(cluster, job, SearchSpace{}, kTop);
      int refused = 0;
      for (const Prediction& p : r.ranked) {
        const std::string why = trainer_refusal(job, p.config);
        refused += !why.empty();
        EXPECT_EQ(why, "") << cluster.name << ", " << job.model.name << " on " << job.world
                           << ": the planner ranks " << short_name(p.config)
                           << ", which the trainer refuses";
      }
      fmt::print(
          "{:<13} {:<6} {:<10} on {:>4}: {:>6} candidates, top {:>2} ranked, {} refused by the "
          "trainer\n",
          cluster.name, precision_name(precision), job.model.name, job.world, r.candidates,
          r.ranked.size(), refused);
      ranked += static_cast<int>(r.ranked.size());
    }
    // Not vacuous: every preset ranks some layout of some model.
    EXPECT_GT(ranked, 0) << cluster.name;
  }
}

// One engine, one rule book: ZeRO, sequence parallelism and zb-h1 are feasible in either precision
// (the planner ranks them on a bf16 preset) and the trainer accepts them; what no device runs is
// refused in both, with the run config's key.
TEST(Feasibility, EveryPrecisionHasTheSameRules) {
  Job job;
  job.model = model::load_gpt_config(test::source_path("configs/models/gpt2-124m.toml")).value();
  job.seq_len = 1024;
  job.global_batch = 32;
  job.world = 8;
  const layout::Layout zero3{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 1, .zero = 3};
  const layout::Layout sp{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 1, .sequence_parallel = true};
  const layout::Layout zb{
      .tp = 2, .pp = 2, .dp = 2, .micro_batch = 1, .schedule = schedule::Kind::ZeroBubbleH1};
  const layout::Layout lone{.tp = 2,
                            .pp = 1,
                            .dp = 4,
                            .vp = 2,
                            .micro_batch = 1,
                            .schedule = schedule::Kind::Interleaved};
  for (const layout::Layout& c : {zero3, sp, zb, lone}) {
    for (const Precision p : {Precision::BF16Mixed, Precision::FP32}) {
      job.precision = p;
      EXPECT_TRUE(validate(c, job).ok()) << short_name(c) << ": " << validate(c, job).message();
    }
    EXPECT_EQ(trainer_refusal(job, c), "") << short_name(c);
  }
  const layout::Layout bad{.tp = 5, .pp = 1, .dp = 1, .micro_batch = 1};
  job.world = 5;
  for (const Precision p : {Precision::BF16Mixed, Precision::FP32}) {
    job.precision = p;
    EXPECT_NE(validate(bad, job).message().find("divisible by tp=5"), std::string::npos)
        << validate(bad, job).message();
  }
  EXPECT_NE(trainer_refusal(job, bad).find("divisible by tp=5"), std::string::npos);
}

}  // namespace
}  // namespace weft::planner
