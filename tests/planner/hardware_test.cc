#include <gtest/gtest.h>

#include "planner/test_paths.h"
#include "planner/tune_bench_job.h"
#include "weft/planner/hardware.h"
#include "weft/planner/simulate.h"

namespace weft::planner {
namespace {

constexpr const char* kMinimal = R"(
[cluster]
name = "mini"
device = "X1"
devices_per_node = 4
[memory]
capacity_gib = 16
bandwidth_gbps = 1000
[peak_tflops]
bf16 = 100
[gemm]
compute_units = 10
efficiency = 0.8
[link.node]
bandwidth_gbps = 100
latency_us = 2
[link.network]
bandwidth_gbps = 10
latency_us = 5
)";

TEST(Hardware, EveryCommittedPresetParses) {
  for (const char* name : {"dgx-a100", "frontier", "dgx-h100", "h200", "this-machine"}) {
    const Result<Cluster> c =
        load_cluster(test::source_path(std::string("configs/clusters/") + name + ".toml"));
    EXPECT_TRUE(c.ok()) << name << ": " << c.status().message();
  }
}

TEST(Hardware, PresetUnitsAreConverted) {
  const Cluster c = parse_cluster(kMinimal, "mini.toml").value();
  EXPECT_EQ(c.devices_per_node, 4);
  EXPECT_DOUBLE_EQ(c.memory_bytes, 16.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(c.peak(NumberFormat::BF16), 100e12);
  EXPECT_DOUBLE_EQ(c.peak(NumberFormat::FP32), 0);
  EXPECT_DOUBLE_EQ(c.node.bandwidth, 100e9);
  EXPECT_DOUBLE_EQ(c.network.latency, 5e-6);
  EXPECT_FALSE(c.package.present());
}

TEST(Hardware, EveryProblemIsListedWithSuggestions) {
  std::string text = kMinimal;
  text.replace(text.find("devices_per_node"), 16, "devices_per_nod");
  text.replace(text.find("efficiency = 0.8"), 16, "efficiency = 1.5");
  text += "[linkz]\n";
  const Result<Cluster> c = parse_cluster(text, "bad.toml");
  ASSERT_FALSE(c.ok());
  const std::string m = c.status().message();
  EXPECT_NE(m.find("bad.toml: unknown key cluster.devices_per_nod (did you mean "
                   "'devices_per_node'?)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("unknown table [linkz] (did you mean 'link'?)"), std::string::npos) << m;
  EXPECT_NE(m.find("missing key cluster.devices_per_node"), std::string::npos) << m;
}

TEST(Hardware, RangeProblemsAreReportedTogether) {
  std::string text = kMinimal;
  text.replace(text.find("efficiency = 0.8"), 16, "efficiency = 1.5");
  text.replace(text.find("compute_units = 10"), 18, "compute_units = 0");
  const Result<Cluster> c = parse_cluster(text, "bad.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().problems().size(), 2u) << c.status().message();
  EXPECT_NE(c.status().message().find("gemm.efficiency=1.5 must be in (0, 1]"), std::string::npos);
}

TEST(Hardware, AnIntegerBeyondIntIsAnErrorNotATruncation) {
  std::string text = kMinimal;
  text.replace(text.find("compute_units = 10"), 18, "compute_units = 4294967306");  // 2^32 + 10
  const Result<Cluster> c = parse_cluster(text, "big.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("compute_units=4294967306 is too large"), std::string::npos)
      << c.status().message();
}

TEST(Hardware, TomlRoundTrips) {
  const Cluster c = load_cluster(test::source_path("configs/clusters/frontier.toml")).value();
  const Cluster back = parse_cluster(to_toml(c), "again").value();
  EXPECT_EQ(back.name, c.name);
  EXPECT_EQ(back.devices_per_package, 2);
  EXPECT_NEAR(back.package.bandwidth, c.package.bandwidth, 1);
  EXPECT_NEAR(back.peak_bf16, c.peak_bf16, 1e6);
  EXPECT_NEAR(back.gemm.efficiency, c.gemm.efficiency, 1e-9);
  // A link's own collective rates, when measured, round-trip; absent, they stay 0.
  Cluster m = parse_cluster(kMinimal, "mini").value();
  EXPECT_EQ(m.node.reduce_scatter_bandwidth, 0);
  m.node.reduce_scatter_bandwidth = 10.8e9;
  m.node.all_gather_bandwidth = 15.6e9;
  const Cluster m2 = parse_cluster(to_toml(m), "again").value();
  EXPECT_NEAR(m2.node.reduce_scatter_bandwidth, 10.8e9, 1e3);
  EXPECT_NEAR(m2.node.all_gather_bandwidth, 15.6e9, 1e3);
  EXPECT_EQ(m2.network.all_gather_bandwidth, 0);
}

// memory.runtime_mib, what `weft calibrate` measures: absent, the model's default; written by
// to_toml to the byte (a measured figure is no whole KiB); and what the planner's memory for weft's
// CPU trainer adds, exactly, to every rank.
TEST(Hardware, RuntimeMemoryRoundTripsAndIsWhatThePredictionAdds) {
  Cluster c = parse_cluster(kMinimal, "mini").value();
  c.peak_fp32 = 1e11;
  EXPECT_EQ(c.runtime_bytes, model::kDefaultRuntimeBytes);
  EXPECT_EQ(to_toml(c).find("runtime_mib"), std::string::npos);  // the default is left implicit
  Cluster measured = c;
  measured.runtime_bytes = 11564483;  // 11.03 MiB, as calibrated on 2026-12-01
  const Cluster back = parse_cluster(to_toml(measured), "again").value();
  EXPECT_EQ(back.runtime_bytes, 11564483);

  const Job job = test::tune_bench_job();
  const layout::Layout tp2{.tp = 2, .pp = 1, .dp = 1, .micro_batch = 8};
  const double before = predict(c, job, tp2).memory.total();
  const double after = predict(back, job, tp2).memory.total();
  EXPECT_EQ(after - before, 11564483 - model::kDefaultRuntimeBytes);

  // The calibrated preset of this machine carries its measured figure.
  const Cluster here =
      load_cluster(test::source_path("configs/clusters/this-machine.toml")).value();
  EXPECT_NE(here.runtime_bytes, model::kDefaultRuntimeBytes);
}

// memory.optimizer_bandwidth_gbps, what `weft calibrate` times AdamW at: absent, the optimizer
// step streams at the memory bandwidth, as before; present, the prediction's optimizer step is its
// 28 bytes per parameter of fp32 AdamW at that rate (times compute_scale), to the ns.
TEST(Hardware, OptimizerBandwidthRoundTripsAndPricesTheOptimizerStep) {
  Cluster c = parse_cluster(kMinimal, "mini").value();
  c.peak_fp32 = 1e11;
  c.compute_scale = 1.25;
  EXPECT_EQ(c.optimizer_bandwidth, 0);
  EXPECT_EQ(to_toml(c).find("optimizer_bandwidth_gbps"), std::string::npos);
  Cluster measured = c;
  measured.optimizer_bandwidth = 34.1e9;
  const Cluster back = parse_cluster(to_toml(measured), "again").value();
  EXPECT_NEAR(back.optimizer_bandwidth, 34.1e9, 1);

  const Job job = test::tune_bench_job();
  const layout::Layout dp2{.tp = 1, .pp = 1, .dp = 2, .micro_batch = 4, .zero = 1};
  const double params = 4224512;  // the bench GPT's, half of them per ZeRO-1 rank
  EXPECT_NEAR(predict(back, job, dp2).time.optimizer, 1.25 * params / 2 * 28 / 34.1e9, 1e-9);
  EXPECT_NEAR(predict(c, job, dp2).time.optimizer,
              1.25 * params / 2 * 28 / (c.memory_bandwidth * c.memory_efficiency), 1e-9);
  Cluster bad = c;
  bad.optimizer_bandwidth = -1e9;
  EXPECT_NE(validate(bad).message("x").find("memory.optimizer_bandwidth_gbps=-1 must be >= 0"),
            std::string::npos);
}

// [attention], a fused attention kernel's rates: absent, the materialized attention (batched GEMMs
// and a softmax over the T x T scores in memory), as before; present, each layer's attention is
// its FlashAttention-2-counted FLOPs at the rates (forward 2 b a s^2 d / t, backward 2.5x), the
// scores' memory traffic is gone, and both rates or neither must be given.
TEST(Hardware, FlashAttentionRoundTripsAndPricesTheFusedKernel) {
  Cluster c = parse_cluster(kMinimal, "mini").value();
  EXPECT_FALSE(c.flash_attention());
  EXPECT_EQ(to_toml(c).find("[attention]"), std::string::npos);
  Cluster flash = parse_cluster(std::string(kMinimal) +
                                    "[attention]\nflash_forward_tflops = 50\n"
                                    "flash_backward_tflops = 40\n",
                                "mini")
                      .value();
  EXPECT_NEAR(flash.flash_forward, 50e12, 1);
  EXPECT_NEAR(flash.flash_backward, 40e12, 1);
  const Cluster back = parse_cluster(to_toml(flash), "again").value();
  EXPECT_NEAR(back.flash_forward, 50e12, 1);
  EXPECT_NEAR(back.flash_backward, 40e12, 1);

  // One layer of h = 1024, 16 heads of 64, s = 2048, micro batch 2, no tensor parallelism: the
  // layer's forward differs by the fused kernel's time less the materialized attention's.
  Job job;
  job.model = {.name = "l1",
               .n_layer = 1,
               .n_embd = 1024,
               .n_head = 16,
               .vocab_size = 1024,
               .pad_vocab_to = 1,
               .max_seq_len = 2048};
  job.seq_len = 2048;
  job.global_batch = 2;
  job.world = 1;
  job.precision = Precision::BF16Mixed;
  const layout::Layout one{.micro_batch = 2};
  const Prediction p0 = predict(c, job, one), p1 = predict(flash, job, one);
  EXPECT_LT(p1.time.total, p0.time.total);  // the scores' bytes in memory are gone
  // The fused kernel's time, forward + 2.5x backward at the rates: twice the rates, half of it,
  // and nothing else moves.
  const double fwd_flops = 2.0 * 2 * 16 * 2048.0 * 2048 * 64;  // 2 b a s^2 d
  const double fused = fwd_flops / 50e12 + 2.5 * fwd_flops / 40e12;
  Cluster twice = flash;
  twice.flash_forward *= 2;
  twice.flash_backward *= 2;
  EXPECT_NEAR(p1.time.total - predict(twice, job, one).time.total, fused / 2, 1e-9);

  Cluster half = flash;
  half.flash_backward = 0;
  EXPECT_NE(validate(half).message("x").find("must both be > 0"), std::string::npos);
}

}  // namespace
}  // namespace weft::planner
