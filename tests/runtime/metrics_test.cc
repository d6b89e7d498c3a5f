// Metrics JSONL records and the progress display.

#include "weft/runtime/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

namespace weft::runtime {
namespace {
namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

StepRecord record(int64_t step) {
  StepRecord r;
  r.step = step;
  r.loss = 4.0f - 0.1f * step;
  r.lr = 1e-3;
  r.grad_norm = 0.5;
  r.step_seconds = 0.02;
  r.tokens_per_s = 3200;
  r.mfu_gemm = 0.25;
  r.peak_mem_bytes = 64 << 20;
  r.tokens = step * 64;
  return r;
}

TEST(Metrics, JsonHasEveryFieldAndNullForNonFiniteNumbers) {
  StepRecord r = record(3);
  r.val_loss = 3.5f;
  auto j = to_json(r);
  EXPECT_EQ(j["step"], 3);
  EXPECT_FLOAT_EQ(j["loss"].get<float>(), 3.7f);
  EXPECT_FLOAT_EQ(j["val_loss"].get<float>(), 3.5f);
  EXPECT_DOUBLE_EQ(j["step_ms"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["mfu_gemm"].get<double>(), 0.25);
  EXPECT_FALSE(j.contains("mfu_spec"));  // no spec peak given
  EXPECT_DOUBLE_EQ(j["peak_mem_mib"].get<double>(), 64.0);
  EXPECT_EQ(j["tokens"], 192);
  r.loss = std::numeric_limits<float>::quiet_NaN();
  r.skipped = true;
  j = to_json(r);
  EXPECT_TRUE(j["loss"].is_null());
  EXPECT_EQ(j["skipped"], true);
  EXPECT_EQ(j.dump().find("NaN"), std::string::npos);
}

TEST(Metrics, WriterAppendsFlushedLinesAndAResumeDropsLinesAfterItsCheckpoint) {
  const std::string path =
      (fs::temp_directory_path() / ("weft_metrics_" + std::to_string(::getpid()) + ".jsonl"))
          .string();
  {
    auto w = MetricsWriter::open(path, 0).value();
    for (int s = 1; s <= 5; ++s) ASSERT_TRUE(w.write(record(s)).ok());
    // Flushed per line: readable while the writer is still open.
    const std::string text = read_text(path);
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5);
  }
  std::ofstream(path, std::ios::app) << "{\"step\": 6, \"lo";  // a line torn by a crash
  {
    auto w = MetricsWriter::open(path, 3).value();  // resumed from the step-3 checkpoint
    ASSERT_TRUE(w.write(record(4)).ok());
  }
  std::ifstream f(path);
  std::string line;
  std::vector<int64_t> steps;
  while (std::getline(f, line)) steps.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4}));
  // A fresh run (keep_through 0) starts an empty file.
  MetricsWriter::open(path, 0).value();
  EXPECT_EQ(read_text(path), "");
  fs::remove(path);
  auto bad = MetricsWriter::open("/no/such/dir/m.jsonl", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("m.jsonl"), std::string::npos);
}

std::string captured(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

TEST(Progress, PlainLinesEveryLogEveryStepsWhenNotATerminal) {
  std::FILE* f = std::tmpfile();
  Progress p(0, 10, 4, /*tty=*/false, f);
  for (int s = 1; s <= 10; ++s) {
    StepRecord r = record(s);
    if (s == 6) r.val_loss = 3.0f;
    p.update(r);
  }
  p.finish();
  const std::string out = captured(f);
  std::fclose(f);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  // Steps 4 and 8 (log_every), 6 (an evaluation) and 10 (the last).
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 4) << out;
  EXPECT_NE(out.find("step 4/10 | loss 3.6000"), std::string::npos) << out;
  EXPECT_NE(out.find("step 6/10 | loss 3.4000 | val 3.0000"), std::string::npos) << out;
  EXPECT_NE(out.find("ETA"), std::string::npos) << out;
  EXPECT_NE(out.find("25.0% of GEMM"), std::string::npos) << out;
}

TEST(Progress, OneRefreshedLineOnATerminal) {
  std::FILE* f = std::tmpfile();
  Progress p(0, 3, 100, /*tty=*/true, f);
  p.update(record(1));
  p.update(record(2));
  p.message("weft train: checkpoint x");
  p.update(record(3));
  p.finish();
  const std::string out = captured(f);
  std::fclose(f);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 3);
  EXPECT_NE(out.find("\nweft train: checkpoint x\n"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
}

TEST(Progress, DurationsReadNaturally) {
  EXPECT_EQ(format_duration(12.4), "12s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
}

}  // namespace
}  // namespace weft::runtime
