// `mpirun -n 2 weft tune` end to end on the tiny model and a synthetic dataset: the trials run,
// the table, tune.json and the winner's keys agree, the winner is the measured fastest of the
// last round, a layout's figure is the median of its trials' steps (and --grid --passes runs
// each layout once per pass), and --write gives a run config `weft plan --check` accepts. Bad
// input fails before any trial with one message that says what to change.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_fixture.h"

namespace weft {
namespace {

using test::read_text;
using test::weft;
using test::weft_command;

// The median (the upper one of an even count) of a tune.json layout's timed steps over its
// successful trials, each trial's series after its `warmup` steps.
double pooled_median(const nlohmann::json& layout, size_t warmup) {
  std::vector<double> steps;
  for (const auto& t : layout["trials"]) {
    if (!t["ok"].get<bool>() || t["stopped"].get<bool>()) continue;
    const auto series = t["step_series_ms"].get<std::vector<double>>();
    steps.insert(steps.end(), series.begin() + static_cast<std::ptrdiff_t>(warmup), series.end());
  }
  std::sort(steps.begin(), steps.end());
  return steps.empty() ? 0 : steps[steps.size() / 2];
}

class CliTuneTest : public test::CliFixture {
 protected:
  std::string write_run() {
    const std::string path = dir_ + "/run.toml";
    std::ofstream(path) << "[model]\nconfig = \"" WEFT_SOURCE_DIR "/configs/models/tiny.toml\"\n"
                        << "[data]\ntrain = \"" << dir_ << "/syn.bin\"\nval_fraction = 0.2\n"
                        << "tokenizer = \"none\"\n"
                        << "[train]\nmicro_batch = 4  # kept comment\nglobal_batch = 4\n"
                        << "steps = 8\nthreads = 1\n[run]\nout_dir = \"" << dir_ << "/out\"\n";
    return path;
  }
};

TEST_F(CliTuneTest, TwoRanksTuneTheTinyModelWithinTheBudget) {
  const std::string run = write_run();
  const auto r =
      weft_command(WEFT_MPIRUN " -n 2 " WEFT_BIN " tune " + run + " --budget-trials 4 --write " +
                   dir_ + "/tuned.toml --calibrate-out " + dir_ + "/fitted.toml");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "infeasible");
  EXPECT_HAS(r.text, "| planner rank | layout |");
  EXPECT_HAS(r.text, "**winner**");
  EXPECT_HAS(r.text, "refit: the planner's step time error");
  EXPECT_HAS(r.text, "[parallel]\ntp = ");
  EXPECT_HAS(r.text, "[train]\nmicro_batch = ");

  const auto j = nlohmann::json::parse(read_text(dir_ + "/out/tune/tune.json"));
  EXPECT_LE(j["trials"].get<int>(), 4);
  EXPECT_GE(j["trials"].get<int>(), 1);
  EXPECT_EQ(j["world"], 2);
  EXPECT_GT(j["infeasible"].get<int>(), 0);
  // The GEMM speed probes: three before the search, one before each trial (recorded with it);
  // the run's speed is the fastest.
  EXPECT_HAS(r.text, "GEMM speed ");
  EXPECT_EQ(j["gemm_speed"]["probes"].get<int>(), 3 + j["trials"].get<int>());
  const double speed = j["gemm_speed"]["fastest"].get<double>();
  EXPECT_GT(speed, 0);
  // The warning comes with a speed far from the preset's, and only then (this machine may be
  // another host than the one the committed preset was measured on).
  EXPECT_EQ(r.text.find("it may describe another machine") != std::string::npos,
            j["gemm_speed"]["foreign"].get<bool>())
      << r.text;
  for (const auto& l : j["layouts"]) {
    for (const auto& t : l["trials"]) {
      EXPECT_GT(t["gemm_speed"].get<double>(), 0) << l.dump();
      EXPECT_LE(t["gemm_speed"].get<double>(), speed) << l.dump();
    }
  }
  ASSERT_TRUE(j["winner"].is_string()) << j.dump(2);
  // The winner is the fastest latest measurement among the layouts of the last round, and it was
  // measured (never one the planner ranked infeasible: only feasible ones are tried).
  double fastest = std::numeric_limits<double>::infinity();
  std::string fastest_layout, winner_short;
  int last_round = 0;
  for (const auto& l : j["layouts"]) last_round = std::max(last_round, l["last_round"].get<int>());
  for (const auto& l : j["layouts"]) {
    if (l["last_round"].get<int>() != last_round || l["measured_ms"].is_null()) continue;
    if (l["measured_ms"].get<double>() < fastest) {
      fastest = l["measured_ms"];
      fastest_layout = l["layout"];
      winner_short = l["short"];
    }
  }
  EXPECT_EQ(j["winner"], fastest_layout);
  EXPECT_HAS(r.text, "winner: " + winner_short);
  // A trial's step time is the median of its timed steps, its fastest beside it; a layout's
  // figure is the median of all its trials' timed steps, pooled (planner::CandidateRecord).
  int below_median = 0;
  for (const auto& l : j["layouts"]) {
    for (const auto& t : l["trials"]) {
      if (!t["ok"].get<bool>() || t["stopped"].get<bool>()) continue;
      // The series: the 2 warm-up steps, then the timed ones.
      auto series = t["step_series_ms"].get<std::vector<double>>();
      ASSERT_EQ(series.size(), 2u + t["steps"].get<size_t>()) << l.dump();
      series.erase(series.begin(), series.begin() + 2);
      std::sort(series.begin(), series.end());
      EXPECT_EQ(series[series.size() / 2], t["step_ms"].get<double>()) << l.dump();
      EXPECT_EQ(series.front(), t["fastest_step_ms"].get<double>()) << l.dump();
      below_median += t["fastest_step_ms"].get<double>() < t["step_ms"].get<double>();
    }
    if (!l["measured_ms"].is_null()) {
      EXPECT_EQ(l["measured_ms"].get<double>(), pooled_median(l, 2)) << l.dump();
    }
  }
  // Steps equal to the nanosecond in every trial would mean the median is not taken.
  EXPECT_GT(below_median, 0) << j.dump(2);
  EXPECT_HAS(read_text(dir_ + "/out/tune/tune.svg"), "<circle");
  EXPECT_HAS(read_text(dir_ + "/out/tune/tune.md"), "```toml\n[parallel]");

  // The written config: the run's own keys replaced, its comments kept, and the planner's gate
  // passes it on 2 processes.
  const std::string tuned = read_text(dir_ + "/tuned.toml");
  EXPECT_HAS(tuned, "  # kept comment");
  EXPECT_HAS(tuned, "[parallel]\ntp = ");
  const auto check = weft("plan --check " + dir_ + "/tuned.toml --world 2");
  EXPECT_EQ(check.rc, 0) << check.text;
  EXPECT_HAS(check.text, "fits in memory   yes");

  // The refitted preset: the base preset's header (what `weft calibrate` measured) on top, the
  // refit's line after it, and the fitted calibration.
  EXPECT_HAS(r.text, "wrote the refitted preset " + dir_ + "/fitted.toml");
  const std::string fitted = read_text(dir_ + "/fitted.toml");
  EXPECT_EQ(fitted.rfind("# This machine, measured by `weft calibrate`", 0), 0u) << fitted;
  EXPECT_HAS(fitted, "# refitted by weft tune " + run + " on ");
  EXPECT_HAS(fitted, "[calibration]\ncompute_scale = ");
  // ... and the speed its factors hold at, the fastest probe's.
  std::ostringstream at;
  at << "\ngemm_speed = " << std::setprecision(6) << speed << "\n";
  EXPECT_HAS(fitted, at.str());
}

// The grid in passes: every layout once per pass, its figure the median of its trials' steps.
// Its preset says its factors were fitted on a machine 100x this one's GEMM speed: the tune warns
// that the preset may be another machine's, and goes on.
TEST_F(CliTuneTest, TheGridsPassesRunEveryLayoutOncePerPass) {
  const std::string run = write_run();
  std::string preset = read_text(WEFT_SOURCE_DIR "/configs/clusters/this-machine.toml");
  const size_t key = preset.find("\ngemm_speed = ");
  ASSERT_NE(key, std::string::npos);
  const size_t end = preset.find('\n', key + 1);
  const double committed = std::stod(preset.substr(key + 14, end - key - 14));
  preset.replace(key, end - key, "\ngemm_speed = " + std::to_string(100 * committed));
  std::ofstream(dir_ + "/foreign.toml") << preset;
  const auto r = weft_command(WEFT_MPIRUN " -n 2 " WEFT_BIN " tune " + run +
                              " --grid --passes 2 --top 3 --steps 1 --warmup 1 --out " + dir_ +
                              "/grid --cluster " + dir_ + "/foreign.toml");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text,
             "grid: the 3 best-predicted layouts, 1 warm-up + 2 timed steps each, 2 passes");
  const auto j = nlohmann::json::parse(read_text(dir_ + "/grid/tune.json"));
  EXPECT_EQ(j["passes"], 2);
  EXPECT_EQ(j["trials"], 6);
  EXPECT_EQ(j["layouts"].size(), 3u);
  EXPECT_HAS(r.text, "warning: this machine runs the run's GEMMs at 0.0");
  EXPECT_HAS(r.text, "it may describe another machine");
  EXPECT_TRUE(j["gemm_speed"]["foreign"].get<bool>());
  EXPECT_EQ(j["gemm_speed"]["probes"], 3 + 6);
  for (const auto& l : j["layouts"]) {
    ASSERT_EQ(l["trials"].size(), 2u) << l.dump();
    EXPECT_EQ(l["timed_steps"], 4);
    EXPECT_EQ(l["measured_ms"].get<double>(), pooled_median(l, 1)) << l.dump();
    // ... and its memory the least of its trials', each rank statistic on its own.
    for (const char* key : {"mib", "rank0_mib"}) {
      const std::string trial_key = key == std::string("mib") ? "peak_mib" : key;
      EXPECT_EQ(l[std::string("measured_") + key].get<double>(),
                std::min(l["trials"][0][trial_key].get<double>(),
                         l["trials"][1][trial_key].get<double>()))
          << l.dump();
    }
  }
  const auto bad = weft("tune " + run + " --passes 2");
  EXPECT_NE(bad.rc, 0);
  EXPECT_HAS(bad.text, "--passes requires --grid");
}

// --refit-from: an earlier tune's figures join this one's in the refit (the note counts them all),
// the written preset says where they came from; a tune.json of another job, or no tune.json, is
// one error before any trial, and so is one whose figures are an older weft's.
TEST_F(CliTuneTest, TheRefitPoolsAnEarlierTunesFigures) {
  const std::string run = write_run();
  const std::string mpirun = WEFT_MPIRUN " -n 2 " WEFT_BIN " tune " + run;
  auto r = weft_command(mpirun + " --budget-trials 2 --out " + dir_ + "/a");
  ASSERT_EQ(r.rc, 0) << r.text;
  const auto a = nlohmann::json::parse(read_text(dir_ + "/a/tune.json"));
  const size_t a_layouts = a["refit"]["layouts"].size();
  ASSERT_GT(a_layouts, 0u);
  r = weft_command(mpirun + " --budget-trials 2 --out " + dir_ + "/b --refit-from " + dir_ +
                   "/a/tune.json --calibrate-out " + dir_ + "/fitted.toml");
  ASSERT_EQ(r.rc, 0) << r.text;
  const auto b = nlohmann::json::parse(read_text(dir_ + "/b/tune.json"));
  const size_t b_layouts = b["refit"]["layouts"].size();
  EXPECT_EQ(b["refit"]["pooled_layouts"], a_layouts);
  EXPECT_EQ(b["refit"]["errors_after"].size(), b_layouts);  // this tune's own layouts
  EXPECT_HAS(r.text, "refit with " + std::to_string(a_layouts) +
                         " layouts' figures from 1 earlier tune(s): the planner's step time "
                         "error on these " +
                         std::to_string(b_layouts) + " layouts");
  EXPECT_HAS(b["refit"]["note"].get<std::string>(),
             "refitted from " + std::to_string(a_layouts + b_layouts) + " measured trials");
  EXPECT_HAS(read_text(dir_ + "/fitted.toml"),
             "on " + std::to_string(a_layouts + b_layouts) + " measured layouts (" +
                 std::to_string(a_layouts) + " from " + dir_ + "/a/tune.json)");

  // Another job (4 processes), and a file that is no tune.json.
  auto other = a;
  other["world"] = 4;
  std::ofstream(dir_ + "/other.json") << other.dump();
  r = weft_command(mpirun + " --refit-from " + dir_ + "/other.json");
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.text, "it tuned \"tiny\" on 4 process(es)");
  EXPECT_HAS(r.text, "a refit pools trials of one job");
  EXPECT_EQ(r.text.find("trial   1"), std::string::npos) << r.text;
  // A tune.json whose figures are an older weft's fastest steps, not medians.
  auto older = a;
  older.erase("figure");
  std::ofstream(dir_ + "/older.json") << older.dump();
  r = weft_command(mpirun + " --refit-from " + dir_ + "/older.json");
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.text, "its figures are an older weft's");
  EXPECT_EQ(r.text.find("trial   1"), std::string::npos) << r.text;
  r = weft_command(mpirun + " --refit-from " + run);
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.text, "is not a tune.json");
}

TEST_F(CliTuneTest, BadInputFailsBeforeAnyTrialSayingWhatToChange) {
  const std::string run = write_run();
  auto r = weft("tune " + run + " --budget-minutes 1e-9");
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.text, "is too small for one trial");
  EXPECT_HAS(r.text, "give --budget-minutes");
  EXPECT_EQ(r.text.find("trial   1"), std::string::npos) << r.text;

  // 3 processes: global batch 4 and tiny's 4 heads and 2 layers leave no layout.
  r = weft_command(WEFT_MPIRUN " -n 3 " WEFT_BIN " tune " + run);
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.text, "no layout of tiny can run on 3 process(es)");
  EXPECT_HAS(r.text, "change the number of processes");

  std::ofstream(dir_ + "/bf16-only.toml") << [&] {
    std::string t = read_text(WEFT_SOURCE_DIR "/configs/clusters/this-machine.toml");
    const auto at = t.find("\nfp32 = ");
    return t.replace(at, 1, "\nbf16 = 1\n#");
  }();
  r = weft("tune " + run + " --cluster " + dir_ + "/bf16-only.toml");
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.text, "has no peak rate for fp32");
  EXPECT_HAS(r.text, "weft calibrate");

  // A device this process cannot reach (CI has no GPU; or weft was built without CUDA).
  r = weft("tune " + run +
           " --device cuda:7 --cluster " WEFT_SOURCE_DIR "/configs/clusters/h200.toml");
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.text, "cuda");
  EXPECT_EQ(r.text.find("trial   1"), std::string::npos) << r.text;
}

// --device: the trials run where `weft train --device` runs (here host-bf16, the GPU's code path
// on the CPU) and the planner prices them in its precision, bf16 mixed. The device engine's memory
// is what it takes from its backend, which the one memory model predicts to the byte: every
// layout's busiest rank and rank 0 measure exactly their prediction. A preset without a bf16 peak
// is refused before any trial.
TEST_F(CliTuneTest, ADeviceTunesInItsPrecisionAndMeasuresThePredictedMemory) {
  const std::string run = write_run();
  std::ofstream(dir_ + "/with-bf16.toml") << [&] {
    std::string t = read_text(WEFT_SOURCE_DIR "/configs/clusters/this-machine.toml");
    const auto at = t.find("\nfp32 = ");
    return t.insert(at, "\nbf16 = 0.05");  // the emulation's rate does not matter here
  }();
  const auto r =
      weft_command(WEFT_MPIRUN " -n 2 " WEFT_BIN " tune " + run +
                   " --device host-bf16 --budget-trials 3 --cluster " + dir_ + "/with-bf16.toml");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "**winner**");
  EXPECT_EQ(r.text.find("GEMM speed "), std::string::npos) << r.text;  // no host GEMM probe
  const auto j = nlohmann::json::parse(read_text(dir_ + "/out/tune/tune.json"));
  EXPECT_EQ(j["device"], "host-bf16");
  EXPECT_EQ(j["precision"], "bf16-mixed");
  int measured = 0;
  for (const auto& l : j["layouts"]) {
    if (l["measured_mib"].is_null()) continue;
    ++measured;
    EXPECT_DOUBLE_EQ(l["measured_mib"].get<double>(), l["predicted_mib"].get<double>())
        << l["layout"];
    EXPECT_DOUBLE_EQ(l["measured_rank0_mib"].get<double>(), l["predicted_rank0_mib"].get<double>())
        << l["layout"];
  }
  EXPECT_GE(measured, 1);

  const auto bad = weft("tune " + run + " --device host-bf16");  // this-machine: fp32 only
  EXPECT_NE(bad.rc, 0);
  EXPECT_HAS(bad.text, "has no peak rate for bf16-mixed, the precision of --device host-bf16");
}

}  // namespace
}  // namespace weft
