// Checkpoints are written from the optimizer's state where it lives, with no host copy of the
// model state (issue #19): the device engine streams its state out of the backend's memory
// through a bounded staging buffer, and a load streams it back through load_pieces' bounded
// window. Measured on the host-bf16 backend, whose "device" memory is host memory too, so the
// process's resident memory shows any copy: the peak during a save (and a load) rises by about the
// buffer, not by the state's size, and the engine holds nothing on the host besides the backend's
// allocations.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/memory_usage.h"
#include "weft/core/pending_file.h"
#include "weft/kernels/backend.h"
#include "weft/kernels/kernels.h"
#include "weft/runtime/checkpointing.h"
#include "weft/runtime/engine.h"

namespace weft::runtime {
namespace {
namespace fs = std::filesystem;

// About 6.7 M parameters: 80 MB of state in a checkpoint (parameters, m, v: 12 bytes each), far
// above the buffers, so a copy of it cannot hide in the bounds.
const char* kRun = R"(
[model]
name = "wide"
n_layer = 2
n_embd = 384
n_head = 6
vocab_size = 8192
max_seq_len = 32

[data]
train = "unused"
tokenizer = "none"

[train]
seq_len = 16
micro_batch = 1
steps = 1
seed = 5
threads = 2
)";

constexpr int64_t kStagingBytes = int64_t{2} << 20;
// What a save or a load allocates besides its buffers: piece lists, metadata text, file handles,
// allocator slack. Measured: 0.1-0.6 MiB; 8 MiB leaves room for a noisy allocator and stays an
// order of magnitude below the state.
constexpr int64_t kSlackBytes = int64_t{8} << 20;

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// The state's size as a checkpoint holds it: every group of every chunk.
int64_t state_bytes(RankState& st) {
  int64_t n = 0;
  for (int j = 0; j < st.num_chunks(); ++j) n += 3 * st.place(j).layout->buffer.total();
  return n * int64_t{sizeof(float)};
}

std::vector<float> read_all(RankState& st, int group) {
  const int64_t n = st.place(0).layout->buffer.total();
  std::vector<float> out(static_cast<size_t>(n));
  st.read(0, group, 0, n, out.data());
  return out;
}

TEST(CheckpointMemory, ADeviceEngineSavesAndLoadsThroughItsBufferNotACopyOfTheState) {
  if (!reset_peak_resident()) GTEST_SKIP() << "the kernel does not allow resetting VmHWM";
  const std::string dir =
      (fs::temp_directory_path() / ("weft_checkpoint_memory_" + std::to_string(::getpid())))
          .string();
  fs::remove_all(dir);
  const config::RunConfig cfg =
      config::parse_run_config(kRun, "wide.toml", {"run.out_dir=" + dir}).value_or_throw("config");
  kernels::set_num_threads(2);
  auto backend = kernels::make_host_backend(Precision::BF16Mixed);
  const EngineDevice device{backend.get(), {}, kStagingBytes};
  parallel::ProcessGroups none;

  // 1. The engine holds nothing on the host besides the backend's allocations (the device's
  // memory, here host memory): no shadow copy of the state for checkpoints.
  const int64_t before_engine = current_resident_bytes();
  auto engine = make_engine(cfg, none, nullptr, device).value_or_throw("engine");
  engine->runner().init(static_cast<uint64_t>(cfg.train.seed));
  const int64_t engine_host = current_resident_bytes() - before_engine;
  RankState& st = *engine->checkpoint_job().state;
  const int64_t state = state_bytes(st);
  std::fprintf(stderr,
               "weft-memory: state %.1f MiB; engine resident %.1f MiB, backend allocated %.1f "
               "MiB\n",
               mib(state), mib(engine_host), mib(backend->allocated_bytes()));
  ASSERT_GT(state, 60 << 20);
  EXPECT_LE(engine_host, backend->allocated_bytes() + kSlackBytes)
      << "the engine holds host memory besides the backend's: a copy of the state?";

  // 2. A save: the peak rises by about the staging buffer.
  checkpoint::TrainState ts;
  ts.step = 1;
  const std::string root = dir + "/checkpoints";
  ASSERT_TRUE(checkpoint::prepare_root(root, true).ok());
  const int64_t before_save = current_resident_bytes();
  ASSERT_TRUE(reset_peak_resident());
  auto saved = save_checkpoint(engine->checkpoint_job(), root, ts, 0);
  const int64_t save_rise = peak_resident_bytes() - before_save;
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  std::fprintf(stderr, "weft-memory: save of %.1f MB: resident peak +%.1f MiB (staging %.1f MiB)\n",
               saved.value().bytes / 1e6, mib(save_rise), mib(kStagingBytes + kDirectStageBytes));
  EXPECT_GE(saved.value().bytes, state);
  EXPECT_LE(save_rise, kStagingBytes + kDirectStageBytes + kSlackBytes)
      << "host memory during a save grows with the state, not with the buffer";

  // 3. A load into another engine (initialized from another seed): the peak rises by about
  // load_pieces' window and its run buffer, and the state arrives bit for bit.
  const std::vector<float> want[3] = {read_all(st, 0), read_all(st, 1), read_all(st, 2)};
  auto other = make_engine(cfg, none, nullptr, device).value_or_throw("engine");
  other->runner().init(99);
  const int64_t before_load = current_resident_bytes();
  ASSERT_TRUE(reset_peak_resident());
  checkpoint::TrainState loaded_ts;
  auto loaded = load_checkpoint(other->checkpoint_job(), saved.value().dir, loaded_ts);
  const int64_t load_rise = peak_resident_bytes() - before_load;
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  std::fprintf(stderr, "weft-memory: load: resident peak +%.1f MiB (window %.1f MiB)\n",
               mib(load_rise), mib(checkpoint::kLoadWindowFloats * 4));
  EXPECT_LE(load_rise, 2 * checkpoint::kLoadWindowFloats * int64_t{sizeof(float)} + kSlackBytes)
      << "host memory during a load grows with the state, not with the window";
  RankState& ot = *other->checkpoint_job().state;
  for (int g = 0; g < 3; ++g) {
    const std::vector<float> got = read_all(ot, g);
    ASSERT_EQ(got.size(), want[g].size());
    EXPECT_EQ(std::memcmp(got.data(), want[g].data(), got.size() * sizeof(float)), 0)
        << "state group " << g << " differs after the round trip";
  }
  EXPECT_EQ(ot.step_count(), st.step_count());
  fs::remove_all(dir);
}

// The format does not depend on the engine: the CPU engine's checkpoint loads into the device
// engine, whose checkpoint of that state loads back into a CPU engine bit for bit.
TEST(CheckpointMemory, CheckpointsGoFromTheCpuToTheDeviceAndBackBitForBit) {
  const std::string dir =
      (fs::temp_directory_path() / ("weft_checkpoint_engines_" + std::to_string(::getpid())))
          .string();
  fs::remove_all(dir);
  const config::RunConfig cfg = config::parse_run_config(kRun, "wide.toml",
                                                         {"run.out_dir=" + dir, "model.n_embd=64",
                                                          "model.n_head=4", "model.vocab_size=300"})
                                    .value_or_throw("config");
  kernels::set_num_threads(2);
  auto backend = kernels::make_host_backend(Precision::BF16Mixed);
  parallel::ProcessGroups none;
  auto cpu = make_engine(cfg, none, nullptr, {}).value_or_throw("cpu engine");
  cpu->runner().init(7);
  checkpoint::TrainState ts;
  ts.step = 1;
  auto first = save_checkpoint(cpu->checkpoint_job(), dir + "/a", ts, 0);
  ASSERT_TRUE(first.ok()) << first.status().message();

  auto dev = make_engine(cfg, none, nullptr, {backend.get(), {}, 4096}).value_or_throw("device");
  checkpoint::TrainState got;
  auto loaded = load_checkpoint(dev->checkpoint_job(), first.value().dir, got);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  auto second = save_checkpoint(dev->checkpoint_job(), dir + "/b", ts, 0);
  ASSERT_TRUE(second.ok()) << second.status().message();

  auto back = make_engine(cfg, none, nullptr, {}).value_or_throw("cpu engine");
  loaded = load_checkpoint(back->checkpoint_job(), second.value().dir, got);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  RankState& a = *cpu->checkpoint_job().state;
  RankState& b = *back->checkpoint_job().state;
  for (int g = 0; g < 3; ++g) {
    const std::vector<float> x = read_all(a, g), y = read_all(b, g);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << "group " << g;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weft::runtime
