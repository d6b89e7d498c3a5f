// `weft train` on a cluster that fails in the ways clusters do (issue 38), through the binary
// under mpirun as a user runs it. A straggler: world rank 1 of 2 spends 40 ms more in each step's
// compute; it is named on the progress line, and metrics.jsonl shows every rank's compute and
// waiting. A hung rank: world rank 3 of 4 stops (SIGSTOP, as a stuck
// kernel, a GPU fault or a paused process look to its peers) as step 5 begins. The job must end
// within the deadline (train.comm_timeout = 5 s) + 10 s, every rank that reports must name world
// rank 3 and its host with the op, group and step it was in, no rank may be left running, the
// last complete checkpoint stays `latest`, and `--resume auto` continues with the losses of the
// run that never stopped.

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <sstream>
#include <string>

#include "support/cli_fixture.h"

namespace weft {
namespace {

using test::losses;
using test::read_text;
using test::weft_command;

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

class FlakyClusterTest : public test::CliFixture,
                         public ::testing::WithParamInterface<const char*> {};

TEST_P(FlakyClusterTest, AStoppedRankIsNamedByWorldRankAndHostAndTheRunResumes) {
  const std::string run = write_run();
  const std::string train = WEFT_MPIRUN " -n 4 " WEFT_BIN " train " + run + " " + GetParam() +
                            " --set train.save_every=2 --set train.comm_timeout=5";
  auto r = weft_command(train + " --set run.out_dir=" + dir_ + "/whole");
  ASSERT_EQ(r.rc, 0) << r.text;

  const auto t0 = std::chrono::steady_clock::now();
  r = weft_command("WEFT_FAULT=step:5:3:STOP " + train);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.rc, 0) << r.text;
  // Four steps and the startup take about 3 s here; then 5 s of deadline, 2 s of roll call.
  EXPECT_LT(seconds, 5 + 10 + 5) << r.text;
  const std::string stopped = "world rank 3 on " + host_name();
  EXPECT_HAS(r.text, stopped + " did not answer the roll call");
  EXPECT_HAS(r.text, "at step 5 ");
  EXPECT_HAS(r.text, " on group '");
  // The stopped rank, woken by the launcher's SIGCONT as it ends the job, may report before it is
  // killed: then it says that it was the one the job waited for.
  if (const size_t at = r.text.find("[rank 3] error"); at != std::string::npos) {
    EXPECT_HAS(r.text.substr(at, r.text.find('\n', at) - at), "the job waited for this rank");
  }
  // No rank of the job outlives it, the stopped one included. ("[/]tmp/...": a pattern that the
  // shell running pgrep, whose command line holds it, does not match.)
  const auto left = weft_command("pgrep -af '[" + run.substr(0, 1) + "]" + run.substr(1) + "'");
  EXPECT_NE(left.rc, 0) << "still running:\n" << left.text;
  // Step 4's save went to the background (train.async_checkpoint) and is committed only after a
  // later step, which never ends: the last complete checkpoint is step 2's.
  EXPECT_EQ(read_text(out("/checkpoints/latest")), "step_00000002\n");

  r = weft_command(train + " --resume auto");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "resuming at step 2");
  // The same layout over the same steps: the same bits.
  EXPECT_EQ(losses(out("/metrics.jsonl")), losses(dir_ + "/whole/metrics.jsonl"));
}

class StragglerTest : public test::CliFixture {};

TEST_F(StragglerTest, ARankThatComputesSlowerIsNamedAndMetricsShowEveryRank) {
  const std::string run = write_run();
  const auto r =
      weft_command("WEFT_FAULT=slow:40:1 " WEFT_MPIRUN " -n 2 " WEFT_BIN " train " + run +
                   " --set parallel.dp=2 --set train.steps=12 --set train.log_every=2 "
                   "--set train.eval_every=0 --set train.save_every=0");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "rank tp0-dp1-pp0 (world rank 1) is a straggler");
  EXPECT_EQ(r.text.find("rank tp0-dp0-pp0 (world rank 0) is a straggler"), std::string::npos);
  // Every log interval: both ranks' compute and waiting; rank 1 computes the 40 ms more, rank 0
  // waits for it.
  std::istringstream lines(read_text(out("/metrics.jsonl")));
  int intervals = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("rank_compute_ms")) continue;
    ++intervals;
    const auto compute = j["rank_compute_ms"].get<std::vector<double>>();
    const auto comm = j["rank_comm_ms"].get<std::vector<double>>();
    ASSERT_EQ(compute.size(), 2u) << line;
    ASSERT_EQ(comm.size(), 2u) << line;
    EXPECT_GT(compute[1], compute[0] + 30) << line;
    EXPECT_GT(comm[0], comm[1] + 30) << line;
  }
  EXPECT_EQ(intervals, 6);
}

INSTANTIATE_TEST_SUITE_P(Layouts, FlakyClusterTest,
                         ::testing::Values("--set parallel.tp=2 --set parallel.pp=2",
                                           "--set parallel.dp=4 --set parallel.zero=3 "
                                           "--set train.global_batch=8",
                                           // the device path, on its host emulation
                                           "--set parallel.tp=2 --set parallel.pp=2 "
                                           "--device host-bf16"),
                         [](const auto& info) {
                           return std::string(info.index == 0   ? "tp2pp2"
                                              : info.index == 1 ? "dp4zero3"
                                                                : "tp2pp2_host_bf16");
                         });

}  // namespace
}  // namespace weft
