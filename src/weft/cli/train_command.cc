// weft train RUN.toml [--set section.key=value]... [--resume [DIR|auto]] [--stop-after N]
// [--device D] [--cluster PRESET]:
// the training loop (runtime/trainer.h) on a run config (config/run_config.h), as one process or
// as every rank of `mpirun -n N weft train ...`; --device cuda trains on the GPU (cli/device.h).
// Everything that can be checked before allocating is: the config (with parallel.auto, the layout
// the planner chooses for the ranks started: cli/auto_layout.h), the dataset, the tokenizer, and
// that the three agree on the vocabulary. Those checks reach the same verdict on every rank, so
// rank 0 alone reports a problem and every rank exits 1. A failure later, while ranks depend on
// each other, ends the whole job with that rank's message (comm::abort_job), so no rank waits
// forever.

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "weft/cli/auto_layout.h"
#include "weft/cli/commands.h"
#include "weft/cli/device.h"
#include "weft/cli/job_world.h"
#include "weft/cli/launch_check.h"
#include "weft/cli/validators.h"
#include "weft/comm/mpi_communicator.h"
#include "weft/config/run_config.h"
#include "weft/core/node.h"
#include "weft/core/stop_signals.h"
#include "weft/data/bpe_tokenizer.h"
#include "weft/data/sampler.h"
#include "weft/data/token_dataset.h"
#include "weft/data/token_stats.h"
#include "weft/parallel/topology.h"
#include "weft/runtime/engine.h"
#include "weft/runtime/pipeline_runner.h"
#include "weft/runtime/trainer.h"

namespace weft::cli {
namespace {

struct TrainOptions {
  std::string run_path;
  std::vector<std::string> sets;
  std::string resume;
  int64_t stop_after = 0;
  std::string device = "cpu";
  std::string cluster = kAutoLayoutCluster;
};

struct Checked {
  config::RunConfig cfg;
  std::unique_ptr<data::TokenDataset> dataset;
  std::string identity, tokenizer_spec;
};

Checked check_inputs(const TrainOptions& o, comm::Communicator* world) {
  const int world_size = world != nullptr ? world->size() : 1;
  const std::string invalid_config = fmt::format("invalid run config ({})", o.run_path);
  const std::string invalid_run = fmt::format("invalid run ({})", o.run_path);
  auto cfg = config::load_run_config(o.run_path, o.sets).value_or_throw(invalid_config);
  apply_parallel_auto(cfg, world_size, o.device, o.cluster, world);
  config::validate_world(cfg, world_size).throw_if_error(invalid_config);
  // The GPU trainer keeps its state in the device's arena, sized and checked as it is made; on
  // the host it needs room for its checkpoint snapshots (check_host_memory).
  const PlannedRun run =
      planned_run(cfg, world_size, o.device == "cpu" ? Precision::FP32 : Precision::BF16Mixed)
          .value_or_throw(invalid_run);
  check_host_memory(run, local_processes(world_size), fmt::format("the run {}", o.run_path), world)
      .throw_if_error("cannot launch");
  auto dataset = data::open_token_dataset(cfg.data.train)
                     .value_or_throw(fmt::format("cannot read data.train ({})", o.run_path));
  std::string identity, tokenizer_spec = cfg.data.tokenizer;
  int tokenizer_vocab = 0;
  if (cfg.data.tokenizer != "none") {
    const std::string dir = data::resolve_tokenizer_dir(cfg.data.tokenizer);
    auto tok = data::BpeTokenizer::load(dir).value_or_throw(
        fmt::format("cannot load data.tokenizer '{}' ({})", cfg.data.tokenizer, o.run_path));
    identity = tok.identity();
    tokenizer_vocab = tok.vocab_size();
    // A directory is recorded absolute, so `weft generate` finds it from anywhere.
    if (cfg.data.tokenizer != "gpt2") {
      tokenizer_spec = std::filesystem::absolute(cfg.data.tokenizer).lexically_normal().string();
    }
  }
  config::validate_data(cfg, *dataset, identity, tokenizer_vocab).throw_if_error(invalid_run);
  check_dataset_ids(cfg, *dataset, world).throw_if_error(invalid_run);
  return {std::move(cfg), std::move(dataset), identity, tokenizer_spec};
}

void train(const TrainOptions& o, Checked in, comm::Communicator* world,
           const StopSignalListener& signals) {
  const config::RunConfig& cfg = in.cfg;
  const data::TokenDataset* dataset = in.dataset.get();
  const bool leader = world == nullptr || world->rank() == 0;

  // The loss a model that ignores context would reach: the bar a trained model must clear.
  const auto split =
      data::split_windows(dataset->num_tokens(), cfg.train.seq_len, cfg.data.val_fraction);
  const double unigram =
      data::unigram_entropy(*dataset, 0, std::max<int64_t>(1, split.train * cfg.train.seq_len));
  if (leader) {
    fmt::print(stderr, "weft train: unigram entropy of the training split: {:.4f} nats/token\n",
               unigram);
  }

  runtime::TrainerOptions options;
  options.resume = o.resume;
  options.stop_after = o.stop_after;
  options.tokenizer_identity = in.identity;
  options.tokenizer_spec = in.tokenizer_spec;
  options.world = world;
  options.signals = &signals;
  // The device's memory is taken before the first step: a CUDA arena of this rank's size.
  const std::unique_ptr<kernels::Backend> device = make_device(o.device, cfg, world);
  if (device) options.device = {device.get(), device_group_maker(o.device, *device)};
  runtime::Trainer trainer(cfg, *dataset, options);
  const auto result = trainer.run().value_or_throw("training failed");
  if (result.stopped || !leader) return;  // the trainer said why and where the checkpoint is
  if (result.records.empty()) {
    fmt::print(stderr, "weft train: nothing to do: {} is at step {} of {}\n", cfg.run.out_dir,
               result.last_step, cfg.train.steps);
    return;
  }
  const auto& last = result.records.back();
  // The latest validation, if any.
  const auto it = std::find_if(result.records.rbegin(), result.records.rend(),
                               [](const auto& r) { return r.val_loss.has_value(); });
  const bool validated = it != result.records.rend();
  fmt::print(stderr, "weft train: step {}/{}: loss {:.4f}{}; checkpoint {}; metrics {}\n",
             last.step, cfg.train.steps, last.loss,
             validated ? fmt::format(", val_loss {:.4f} (step {})", *it->val_loss, it->step) : "",
             result.checkpoint, cfg.metrics_path());
  if (!validated) return;
  const double below = 1.0 - *it->val_loss / unigram;  // > 0: the model beats the unigram
  fmt::print(stderr,
             "weft train: validation loss {:.4f} nats/token vs unigram entropy {:.4f} "
             "nats/token ({:.1f}% {})\n",
             *it->val_loss, unigram, 100.0 * std::abs(below), below >= 0 ? "lower" : "higher");
}

void run_train(const TrainOptions& o) {
  // Listening until MPI_Finalize is over: a rank may hear the job's stop signal after the others
  // agreed to stop (core/stop_signals.h).
  const StopSignalListener signals;
  const JobWorld processes;
  comm::Communicator* world = processes.world();
  const bool leader = world == nullptr || world->rank() == 0;
  std::optional<Checked> in;
  try {
    in.emplace(check_inputs(o, world));
  } catch (const Error& e) {
    if (world == nullptr) throw;
    // One message for the job, printed before MPI_Finalize (which waits for every rank), so no
    // rank exits and gets the job killed before rank 0 has said why.
    if (leader) fmt::print(stderr, "weft: error: {}\n", e.what());
    throw ExitQuietly{1};
  }
  try {
    train(o, std::move(*in), world, signals);
  } catch (const std::exception& e) {
    if (world == nullptr || world->size() == 1) throw;
    comm::abort_job(e.what());
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model from a run config (TOML)");
  auto o = std::make_shared<TrainOptions>();
  cmd->add_option("RUN", o->run_path, "run config (docs/training.md)")->required();
  cmd->add_option("--set", o->sets, "override a key: section.key=value (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--resume", o->resume,
                  "continue a run: a checkpoint directory, or 'auto' (the default when no value "
                  "is given): the latest in run.out_dir, or a fresh start when there is none")
      ->expected(0, 1)
      ->default_str("auto");
  cmd->add_option("--stop-after", o->stop_after,
                  "stop with a checkpoint once this many steps are done (the schedule still "
                  "spans train.steps)")
      ->check(kNonNegative);
  cmd->add_option("--device", o->device, kDeviceHelp);
  cmd->add_option("--cluster", o->cluster,
                  "cluster preset parallel.auto prices layouts with (docs/training.md)")
      ->capture_default_str();
  cmd->callback([o] { run_train(*o); });
}

}  // namespace weft::cli
