// `weft train`, `weft generate` and `weft plot` as a user runs them: the binary on an llm.c token
// file written with weft's own writer. A run split by --stop-after and --resume, a real SIGINT,
// and every kind of bad input: one clear error naming the file, a non-zero exit, nothing written.

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/cli_fixture.h"

extern char** environ;

namespace weft {
namespace {
namespace fs = std::filesystem;

using test::checkpoint_params;
using test::count_lines;
using test::expect_checkpoint_params_close;
using test::expect_steps_close;
using test::losses;
using test::metric;
using test::read_text;
using test::weft;
using test::weft_command;

class CliTrainTest : public test::CliFixture {
 protected:
  // The run in out() against the uninterrupted run in DIR/serial: every step's loss and gradient
  // norm (relative), and the final parameters (relative L2), within the given bounds.
  void expect_follows_serial(double loss, double grad_norm, test::ParamTolerance params) {
    const std::string actual = out("/metrics.jsonl"), expected = dir_ + "/serial/metrics.jsonl";
    ASSERT_EQ(losses(actual).size(), losses(expected).size()) << read_text(actual);
    expect_steps_close(losses(actual), losses(expected), loss, "loss");
    expect_steps_close(metric(actual, "grad_norm"), metric(expected, "grad_norm"), grad_norm,
                       "grad_norm");
    expect_checkpoint_params_close(checkpoint_params(out("/checkpoints")),
                                   checkpoint_params(dir_ + "/serial/checkpoints"), params,
                                   "final parameters");
  }
};

TEST_F(CliTrainTest, TrainResumeGenerateAndPlot) {
  const std::string run = write_run();
  auto r = weft("train " + run + " --stop-after 4");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_EQ(count_lines(out("/metrics.jsonl")), 4);
  EXPECT_EQ(read_text(out("/checkpoints/latest")), "step_00000004\n");

  r = weft("train " + run);  // without --resume: refuses to overwrite
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, "already holds checkpoints");

  r = weft("train " + run + " --resume");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "resuming at step 4");
  EXPECT_HAS(r.text, "step 8/8");
  EXPECT_EQ(count_lines(out("/metrics.jsonl")), 8);
  EXPECT_TRUE(fs::exists(out("/loss.svg")));

  r = weft("generate --checkpoint " + out("/checkpoints") +
           " --prompt '1 8 15' --tokens 5 --temperature 0");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_EQ(r.text.rfind("1 8 15 |", 0), 0u) << r.text;
  EXPECT_EQ(std::count(r.text.begin(), r.text.end(), ' '), 3 + 5) << r.text;
  // The same seed gives the same sample.
  const std::string sample = "generate --checkpoint " + out("/checkpoints/step_00000008") +
                             " --prompt '3' --tokens 8 --top-k 5 --seed 3";
  EXPECT_EQ(weft(sample).text, weft(sample).text);

  r = weft("plot " + out("/metrics.jsonl") + " -o " + dir_ + "/p.svg");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_EQ(read_text(dir_ + "/p.svg").rfind("<svg", 0), 0u);
}

TEST_F(CliTrainTest, TheExampleRunConfigTrains) {
  // Relative paths in a run config are relative to the current directory: the repository here.
  auto r =
      weft("train configs/runs/tiny-synthetic.toml --set data.train=" + dir_ +
           "/syn.bin --set run.out_dir=" + out() + " --set train.steps=4 --set train.threads=1");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_EQ(count_lines(out("/metrics.jsonl")), 4);
}

// `mpirun -n 2 weft train ... --set parallel.tp=2` trains the same model as one process; its
// checkpoint (the serial layout) continues under dp=2 with ZeRO-3 (whose sharded state is
// gathered into the next checkpoint), tp=2 with sequence parallelism, and pp=2: every step's loss
// and gradient norm, and the final parameters, those of the serial run.
TEST_F(CliTrainTest, ParallelRunsFollowTheSerialRunAcrossLayouts) {
  const std::string run = write_run();
  auto r = weft("train " + run + " --set run.out_dir=" + dir_ + "/serial");
  ASSERT_EQ(r.rc, 0) << r.text;
  const std::vector<double> serial = losses(dir_ + "/serial/metrics.jsonl");
  ASSERT_EQ(serial.size(), 8u);

  const std::string mpirun = WEFT_MPIRUN " -n 2 " WEFT_BIN " ";
  r = weft_command(mpirun + "train " + run + " --set parallel.tp=2 --stop-after 4");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "tp=2 pp=1 dp=1, 2 ranks x 1 thread");
  // Continue the tp=2 checkpoint as two data-parallel replicas for 2 steps, then with tp=2 and
  // sequence parallelism, then as a two-stage pipeline.
  r = weft_command(mpirun + "train " + run +
                   " --resume --stop-after 6 --set parallel.dp=2 --set parallel.zero=3");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "tp=1 pp=1 dp=2");
  EXPECT_HAS(r.text, "peak memory per rank");
  r = weft_command(mpirun + "train " + run +
                   " --resume --stop-after 7 --set parallel.tp=2 "
                   "--set parallel.sequence_parallel=true");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "(sequence parallel)");
  r = weft_command(mpirun + "train " + run + " --resume --set parallel.pp=2");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "tp=1 pp=2 dp=1");
  // Bounds about 10x the differences measured: loss 6.7e-8, grad_norm 8.9e-7, parameters 8.3e-7
  // in all and 4.4e-6 in the worst tensor (h.1.mlp.fc.weight).
  expect_follows_serial(1e-6, 9e-6, {.all = 8e-6, .per_tensor = 4e-5});
}

// --device host-bf16 runs the GPU trainer's code (model/gpt.h, runtime/pipeline_runner.h) on
// the host emulation of the CUDA kernels: bf16 mixed precision that follows the fp32 run, with
// checkpoints in the serial layout that the CPU trainer continues. Without a GPU, --device cuda
// is one clear error.
TEST_F(CliTrainTest, TheGpuPathFollowsTheFp32RunAndItsCheckpointContinuesOnTheCpu) {
  const std::string run = write_run();
  auto r = weft("train " + run + " --set run.out_dir=" + dir_ + "/serial");
  ASSERT_EQ(r.rc, 0) << r.text;
  const std::vector<double> serial = losses(dir_ + "/serial/metrics.jsonl");
  ASSERT_EQ(serial.size(), 8u);

  r = weft("train " + run + " --device host-bf16 --stop-after 4");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "host, bf16 mixed precision");
  EXPECT_HAS(r.text, "host memory per rank, allocated / predicted");
  r = weft("train " + run + " --resume");  // the rest on the CPU, in fp32
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "resuming at step 4");
  // bf16 for 4 steps, then fp32, against fp32 throughout. Measured: loss 1.7e-3, grad_norm
  // 2.0e-2, parameters 1.5e-2 in all and 0.14 in the worst tensor (h.0.mlp.fc.bias: small, and
  // still near its zero start). The bounds are 10x, but for the worst tensor 3.5x: 10x would be
  // more than a zeroed tensor's error (1).
  expect_follows_serial(2e-2, 0.2, {.all = 0.15, .per_tensor = 0.5});
  const std::vector<double> mixed = losses(out("/metrics.jsonl"));
  const std::vector<double> mixed_gn = metric(out("/metrics.jsonl"), "grad_norm");
  ASSERT_EQ(mixed.size(), serial.size());
  ASSERT_EQ(mixed_gn.size(), serial.size());
  // Device ranks: a two-stage pipeline, then tensor parallelism and two replicas with ZeRO-3, each
  // from the last one's checkpoint.
  const std::string mpirun = WEFT_MPIRUN " -n 2 " WEFT_BIN " ";
  const std::string ranks = run + " --device host-bf16 --set run.out_dir=" + dir_ + "/ranks";
  r = weft_command(mpirun + "train " + ranks + " --set parallel.pp=2 --stop-after 4");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "tp=1 pp=2 dp=1, 2 ranks on host");
  r = weft_command(mpirun + "train " + ranks + " --set parallel.tp=2 --resume --stop-after 6");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "tp=2 pp=1 dp=1, 2 ranks on host");
  // The replicas with ZeRO-3 (the one optimizer on the bf16 backend: bf16 shards gathered per
  // use), loading the tp=2 run's checkpoint into shards and writing its own from them.
  r = weft_command(mpirun + "train " + ranks +
                   " --set parallel.dp=2 --set parallel.zero=3 --resume");
  ASSERT_EQ(r.rc, 0) << r.text;
  const std::vector<double> ranked = losses(dir_ + "/ranks/metrics.jsonl");
  ASSERT_EQ(ranked.size(), serial.size());
  const std::vector<double> ranked_gn = metric(dir_ + "/ranks/metrics.jsonl", "grad_norm");
  ASSERT_EQ(ranked_gn.size(), serial.size());
  // Against the single-process run: bf16 both for steps 1-4 (measured: losses equal, grad_norm
  // 1.0e-9), then bf16 against fp32 from the same checkpoint (loss 1.3e-4, grad_norm 1.0e-3,
  // final parameters 1.1e-4 in all and 6.2e-4 in the worst tensor, h.1.attn.qkv.bias). Bounds
  // about 10x; 1e-6 for the equal losses.
  auto steps = [](const std::vector<double>& v, size_t first, size_t end) {
    return std::vector<double>(v.begin() + first - 1, v.begin() + end);
  };
  expect_steps_close(steps(ranked, 1, 4), steps(mixed, 1, 4), 1e-6, "loss, bf16");
  expect_steps_close(steps(ranked_gn, 1, 4), steps(mixed_gn, 1, 4), 1e-8, "grad_norm, bf16");
  expect_steps_close(steps(ranked, 5, 8), steps(mixed, 5, 8), 1.3e-3, "loss, bf16 vs fp32", 5);
  expect_steps_close(steps(ranked_gn, 5, 8), steps(mixed_gn, 5, 8), 1e-2, "grad_norm, bf16 vs fp32",
                     5);
  expect_checkpoint_params_close(checkpoint_params(dir_ + "/ranks/checkpoints"),
                                 checkpoint_params(out("/checkpoints")),
                                 {.all = 1.1e-3, .per_tensor = 6e-3}, "final parameters");

  r = weft("train " + run + " --device cuda --set run.out_dir=" + dir_ + "/gpu");
  if (r.rc != 0) {  // no GPU (or no CUDA in this build; heads of 8 on a GPU): said, nothing written
    EXPECT_HAS(r.text, "cuda");
    EXPECT_FALSE(fs::exists(dir_ + "/gpu/checkpoints"));
  }
  r = weft("train " + run + " --device cuda --set parallel.tp=2 --set run.out_dir=" + dir_ +
           "/gpu2");
  EXPECT_NE(r.rc, 0);
  r = weft("train " + run + " --device tpu");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, "--device must be cpu, cuda[:N] or host-bf16, not 'tpu'");
}

// Data-parallel replicas share the validation batches: a dp=2 run evaluates the windows one
// process would (an odd eval_batches: one replica runs more), so its val_loss is the serial one.
TEST_F(CliTrainTest, ReplicasEvaluateTheSerialValidationWindows) {
  const std::string run = write_run();
  const std::string eval = " --set train.eval_every=2 --set train.eval_batches=3 --stop-after 4";
  auto r = weft("train " + run + eval + " --set run.out_dir=" + dir_ + "/serial");
  ASSERT_EQ(r.rc, 0) << r.text;
  r = weft_command(WEFT_MPIRUN " -n 2 " WEFT_BIN " train " + run + eval + " --set parallel.dp=2");
  ASSERT_EQ(r.rc, 0) << r.text;
  const auto serial = test::metric(dir_ + "/serial/metrics.jsonl", "val_loss");
  const auto parallel = test::metric(out("/metrics.jsonl"), "val_loss");
  ASSERT_EQ(serial.size(), 2u);
  ASSERT_EQ(parallel.size(), serial.size());
  for (size_t i = 0; i < serial.size(); ++i) {
    EXPECT_NEAR(parallel[i], serial[i], 1e-5 * serial[i]) << "evaluation " << i;
  }
}

// A rank killed as a step begins, and rank 0 killed halfway through writing a checkpoint
// (core/fault.h), each end the job with a non-zero exit at once; the last complete checkpoint
// loads and the run finishes with the uninterrupted run's losses. Saves in the foreground, so the
// last complete checkpoint is the last one started (the next test: in the background).
TEST_F(CliTrainTest, AKilledRankEndsTheJobAndTheRunResumesFromTheLastCompleteCheckpoint) {
  const std::string run = write_run("");
  auto r = weft("train " + run + " --set run.out_dir=" + dir_ + "/serial");
  ASSERT_EQ(r.rc, 0) << r.text;
  ASSERT_EQ(losses(dir_ + "/serial/metrics.jsonl").size(), 8u);

  const std::string mpirun = WEFT_MPIRUN " -n 2 " WEFT_BIN " ";
  const std::string layout =
      " --set parallel.dp=2 --set parallel.zero=1 --set train.save_every=2 "
      "--set train.async_checkpoint=false";
  auto t0 = std::chrono::steady_clock::now();
  r = weft_command("WEFT_FAULT=step:5:1 " + mpirun + "train " + run + layout);
  EXPECT_NE(r.rc, 0) << r.text;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(read_text(out("/checkpoints/latest")), "step_00000004\n");

  t0 = std::chrono::steady_clock::now();
  r = weft_command("WEFT_FAULT=save:6:0 " + mpirun + "train " + run + " --resume" + layout);
  EXPECT_NE(r.rc, 0) << r.text;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(read_text(out("/checkpoints/latest")), "step_00000004\n");  // 6 never completed

  r = weft_command(mpirun + "train " + run + " --resume" + layout);
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "resuming at step 4");
  EXPECT_EQ(read_text(out("/checkpoints/latest")), "step_00000008\n");
  // Bounds about 10x the differences measured: loss 6.9e-8, grad_norm 1.0e-7, parameters 4.9e-8
  // in all and 2.4e-7 in the worst tensor (h.0.attn.proj.bias).
  expect_follows_serial(1e-6, 1e-6, {.all = 5e-7, .per_tensor = 2.4e-6});
}

// A save in the background (train.async_checkpoint) lets training go on while it drains, and a
// rank killed during the drain leaves the previous checkpoint as `latest`, with no part of the
// unfinished one visible; the resumed run ends with the uninterrupted run's losses. Rank 1's
// writer takes 1.5 s longer (WEFT_FAULT slow_save) and dies once its files of step 4 are written.
TEST_F(CliTrainTest, ARankKilledWhileABackgroundSaveDrainsLeavesThePreviousCheckpoint) {
  const std::string run = write_run("");
  auto r = weft("train " + run + " --set run.out_dir=" + dir_ + "/serial");
  ASSERT_EQ(r.rc, 0) << r.text;

  const std::string mpirun = WEFT_MPIRUN " -n 2 " WEFT_BIN " ";
  const std::string layout = " --set parallel.dp=2 --set parallel.zero=1 --set train.save_every=2";
  r = weft_command("WEFT_FAULT=slow_save:1500:1,save:4:1 " + mpirun + "train " + run + layout);
  EXPECT_NE(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "checkpoint " + out("/checkpoints/step_00000002"));
  EXPECT_HAS(r.text, "in the background, training held");
  EXPECT_EQ(read_text(out("/checkpoints/latest")), "step_00000002\n");
  EXPECT_FALSE(fs::exists(out("/checkpoints/step_00000004")));
  // Training went on while step 4's save drained: step 5 was logged before rank 1 died.
  EXPECT_GE(losses(out("/metrics.jsonl")).size(), 5u) << r.text;

  r = weft_command(mpirun + "train " + run + " --resume" + layout);
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "resuming at step 2");
  EXPECT_HAS(r.text, "removed " + out("/checkpoints/step_00000004.tmp-"));
  EXPECT_EQ(read_text(out("/checkpoints/latest")), "step_00000008\n");
  expect_follows_serial(1e-6, 1e-6, {.all = 5e-7, .per_tensor = 2.4e-6});
}

// A non-finite value in one rank's parameters (a memory error, a bug) is a corrupt state, not a
// bad batch: the job ends at once naming the rank and the tensor, whether a step finds it (ZeRO 0:
// the poisoned parameters give a non-finite loss) or a save does (ZeRO 1: the master copy), and
// the last good checkpoint stays the latest.
TEST_F(CliTrainTest, ANonFiniteParameterOnOneRankEndsTheJobNamingTheRank) {
  const std::string run = write_run();
  const std::string mpirun = "WEFT_FAULT=nan:3:1 " WEFT_MPIRUN " -n 2 " WEFT_BIN " train ";
  const std::string layout = " --set parallel.dp=2 --set train.save_every=2";
  auto t0 = std::chrono::steady_clock::now();
  auto r = weft_command(mpirun + run + layout + " --set parallel.zero=0");
  EXPECT_NE(r.rc, 0) << r.text;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_HAS(r.text, "step 4: rank tp0-dp1-pp0: non-finite parameter nan in wte");
  EXPECT_HAS(r.text, "The last checkpoint is from step 2.");
  EXPECT_EQ(read_text(out("/checkpoints/latest")), "step_00000002\n");

  r = weft_command(mpirun + run + layout + " --set parallel.zero=1 --resume");
  EXPECT_NE(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "rank tp0-dp1-pp0: ");
  EXPECT_HAS(r.text, "model-tp0-dp1-pp0.bin: non-finite value nan in tensor wte (params)");
  EXPECT_EQ(read_text(out("/checkpoints/latest")), "step_00000002\n");
  for (const auto& e : fs::directory_iterator(out("/checkpoints"))) {
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  }
}

TEST_F(CliTrainTest, ALayoutTheModelCannotTakeIsOneErrorFromTheJob) {
  const std::string run = write_run();
  auto r = weft_command(WEFT_MPIRUN " -n 3 " WEFT_BIN " train " + run +
                        " --set parallel.tp=3 --set model.pad_vocab_to=4");
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.text, "n_head=4 is not divisible by tp=3");
  EXPECT_HAS(r.text, "is not divisible by tp=3: set pad_vocab_to to a multiple of 3");
  // said once, by rank 0, not once per rank
  const auto first = r.text.find("n_head=4 is not divisible");
  EXPECT_EQ(r.text.find("n_head=4 is not divisible", first + 1), std::string::npos) << r.text;
  EXPECT_FALSE(fs::exists(out("/metrics.jsonl")));
  r = weft_command(WEFT_MPIRUN " -n 2 " WEFT_BIN " train " + run);
  EXPECT_NE(r.rc, 0);
  EXPECT_HAS(r.text, "tp*pp*dp = 1*1*1 = 1 does not equal the world size 2");
}

TEST_F(CliTrainTest, SigintStopsTheRunWithACheckpointAndExitsZero) {
  const std::string run = write_run();
  const std::string log = dir_ + "/log.txt";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<std::string> args = {WEFT_BIN,
                                   "train",
                                   run,
                                   "--set",
                                   "train.steps=100000000",
                                   "--set",
                                   "train.save_every=0",
                                   "--set",
                                   "train.eval_every=0"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, WEFT_BIN, &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  // Interrupt once a few steps are logged.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (count_lines(out("/metrics.jsonl")) < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string text = read_text(log);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << "\n" << text;
  EXPECT_EQ(WEXITSTATUS(status), 0) << text;
  EXPECT_HAS(text, "stopped by SIGINT after step");
  const int steps = count_lines(out("/metrics.jsonl"));
  EXPECT_EQ(read_text(out("/checkpoints/latest")), fmt::format("step_{:08d}\n", steps));
}

// Slurm signals a step's tasks one after another. Here rank 1 hears SIGTERM as step 3 begins and
// rank 0 only while it writes the checkpoint the ranks agreed on: both stop after step 3, the
// checkpoint is complete, the job exits 0 and names the signal. (Rank 0 was killed by such a late
// signal once, in the Slurm test's srun preemption, when it listened during the steps only.)
TEST_F(CliTrainTest, AStopSignalThatReachesTheRanksAtDifferentMomentsStopsTheJobCleanly) {
  const std::string run = write_run();
  const auto r = weft_command("WEFT_FAULT=step:3:1:TERM,save:3:0:TERM " WEFT_MPIRUN
                              " -n 2 " WEFT_BIN " train " +
                              run + " --set parallel.dp=2 --set train.save_every=0");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_HAS(r.text, "stopped by SIGTERM after step 3/8");
  EXPECT_EQ(read_text(out("/checkpoints/latest")), "step_00000003\n");
  EXPECT_TRUE(fs::exists(out("/checkpoints/step_00000003/metadata.json")));
}

TEST_F(CliTrainTest, BadConfigsAreOneClearErrorNamingTheFile) {
  const std::string run = write_run("[parallel]\ntp = 2\n");
  auto r = weft("train " + run + " --set train.lrr=1 --set train.steps=x");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, "invalid run config (" + run + ")");
  EXPECT_HAS(r.text, "unknown key train.lrr (did you mean 'train.lr'?)");
  EXPECT_HAS(r.text, "train.steps takes an integer");
  r = weft("train " + write_run() + " --set train.global_batch=5 --set model.max_seq_len=8");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, "train.global_batch=5 is not divisible by train.micro_batch=2");
  r = weft("train " + write_run("[parallel]\ntp = 2\n"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, "tp*pp*dp = 2*1*1 = 2 does not equal the world size 1");
  r = weft("train " + dir_ + "/nope.toml");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, dir_ + "/nope.toml: cannot open run config");
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(CliTrainTest, BadDataIsOneClearErrorNamingTheFile) {
  const std::string run = write_run();
  auto r = weft("train " + run + " --set data.train=" + dir_ + "/missing.bin");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, dir_ + "/missing");
  std::ofstream(dir_ + "/junk.bin") << "this is not a dataset";
  r = weft("train " + run + " --set data.train=" + dir_ + "/junk.bin");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, dir_ + "/junk.bin");
  // Ids of a 100-token vocabulary do not fit the tiny model's 61.
  write_dataset("big", 100, "none");
  r = weft("train " + run + " --set data.train=" + dir_ + "/big.bin");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, "vocabulary mismatch");
  EXPECT_HAS(r.text, dir_ + "/big.bin");
  // GPT-2's tokenizer (50257 tokens) does not fit it either, and did not make this dataset.
  r = weft("train " + run + " --set data.tokenizer=gpt2");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, "gpt2");
  // Too little data for the batch.
  write_dataset("small", 61, "none", 16 * 4 + 1);
  r = weft("train " + run + " --set data.train=" + dir_ + "/small.bin");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, "fewer than one global batch (train.global_batch=4)");
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(CliTrainTest, BadCheckpointsAreOneClearErrorAndChangeNothing) {
  const std::string run = write_run();
  ASSERT_EQ(weft("train " + run + " --stop-after 4").rc, 0);
  const std::string shard = out("/checkpoints/step_00000004/optim-tp0-dp0-pp0.bin");
  fs::resize_file(shard, 10);
  const std::string metrics = read_text(out("/metrics.jsonl"));
  auto r = weft("train " + run + " --resume");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, shard);
  EXPECT_HAS(r.text, "truncated");
  EXPECT_EQ(read_text(out("/metrics.jsonl")), metrics);
  r = weft("train " + run + " --resume " + dir_ + "/nowhere");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, dir_ + "/nowhere: not a checkpoint");
  r = weft("generate --checkpoint " + dir_ + "/nowhere --prompt 1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, dir_ + "/nowhere: not a checkpoint");
  r = weft("generate --checkpoint " + out("/checkpoints") + " --prompt 'hello'");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, "token ids");
  r = weft("plot " + dir_ + "/none.jsonl -o " + dir_ + "/x.svg");
  EXPECT_EQ(r.rc, 1);
  EXPECT_HAS(r.text, dir_ + "/none.jsonl: cannot open");
  EXPECT_FALSE(fs::exists(dir_ + "/x.svg"));
}

TEST_F(CliTrainTest, GenerateDecodesWithTheCheckpointsTokenizer) {
  const std::string gpt2 = WEFT_SOURCE_DIR "/assets/gpt2/encoder.json";
  if (!fs::exists(gpt2) && std::getenv("WEFT_ASSETS") == nullptr) {
    GTEST_SKIP() << "GPT-2 tokenizer files not fetched (scripts/fetch_assets.sh)";
  }
  write_dataset("gpt2data", 50257, "gpt2");
  const std::string run = write_run();
  auto r = weft("train " + run + " --set data.tokenizer=gpt2 --set data.train=" + dir_ +
                "/gpt2data.bin --set model.vocab_size=50257 --set model.n_layer=1 --set "
                "train.steps=2 --set train.eval_every=0");
  ASSERT_EQ(r.rc, 0) << r.text;
  r = weft("generate --checkpoint " + out("/checkpoints") +
           " --prompt 'Hello, world' --tokens 4 --temperature 0 --no-stop");
  ASSERT_EQ(r.rc, 0) << r.text;
  EXPECT_EQ(r.text.rfind("Hello, world", 0), 0u) << r.text;
}

}  // namespace
}  // namespace weft
