#pragma once
// A training run's configuration: RUN.toml with [model], [data], [train], [run] and [parallel]
// tables, plus `--set section.key=value` overrides. Every key, its type, default and meaning is in
// one table (run_config_keys(); docs/training.md is its long form): it types the overrides, names
// the nearest key when one is misspelled, and writes the resolved config into checkpoints.
// Problems are collected (weft::Status) and reported together, before anything is allocated.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/core/status.h"
#include "weft/data/sampler.h"
#include "weft/data/token_dataset.h"
#include "weft/layout/layout.h"
#include "weft/layout/validate.h"
#include "weft/model/gpt_config.h"
#include "weft/model/recompute.h"
#include "weft/optim/adamw.h"

namespace weft::config {

struct RunConfig {
  std::string origin;        // the TOML file, for messages
  model::GptConfig model;    // [model]: inline keys, or `config = "path"` (+ inline overrides)
  std::string model_config;  // model.config when given

  struct Data {
    std::string train;               // dataset path (Megatron PREFIX or .bin/.idx, or llm.c .bin)
    double val_fraction = 0.05;      // the last windows of the stream, held out for validation
    std::string tokenizer = "gpt2";  // "gpt2", a tokenizer directory, or "none" (ids only)
  } data;

  struct Train {
    int seq_len = 0;       // T; 0: model.max_seq_len
    int global_batch = 0;  // sequences per optimizer step; 0: micro_batch x dp
    int steps = 0;         // optimizer steps of the whole run (required)
    double lr = 6e-4, min_lr = 6e-5;
    int warmup_steps = 0;
    double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
    double clip = 1.0;           // global gradient-norm clipping; 0: off
    int max_skipped_steps = 10;  // consecutive non-finite steps before the run gives up; 0: never
    int eval_every = 100, eval_batches = 10;
    int save_every = 1000, keep_last = 3;
    // Periodic saves write in the background from a snapshot in host memory (runtime/
    // checkpointing.h CheckpointSaver): on, since a save then holds training for a copy, not for
    // the write (minutes at 175B-1T); its cost is host memory for the rank's fp32 state, 12 bytes
    // per parameter it holds, which the memory model and the launch gate count.
    bool async_checkpoint = true;
    int64_t seed = 1234;
    int threads = 0;  // kernel threads; 0: every core
    int log_every = 10;
    double peak_gflops = 0;  // spec peak for MFU; 0: report MFU against the GEMM ceiling only
    // Seconds a wait for the other ranks may take (comm::Communicator::timeout_seconds); 0: the
    // default (WEFT_COMM_TIMEOUT, else 300).
    double comm_timeout = 0;
  } train;

  struct Run {
    std::string out_dir;  // "": runs/<RUN.toml's stem>
  } run;

  // The layout: [parallel] and train.micro_batch, train.recompute (the keys keep their sections;
  // the value is the one layout type the planner, the checkpoints and the runtime take).
  layout::Layout parallel{.micro_batch = 4};
  // parallel.auto: when `parallel` is for another number of ranks than the job was started with,
  // `weft train` replaces it by the planner's fastest layout for those ranks (cli/auto_layout.h).
  // Not part of the layout: it says how the layout is chosen, not what it is.
  bool auto_layout = false;

  int microbatches() const { return parallel.microbatches(train.global_batch); }
  // Whether each rank keeps a snapshot of its state for asynchronous saves: periodic ones before
  // the last step (the last save and a stop's are written at once: the run waits for them).
  bool keeps_snapshot() const {
    return train.async_checkpoint && train.save_every > 0 && train.save_every < train.steps;
  }
  // Replica dp_rank's data::Sampler: the layout's batches of train.seq_len tokens.
  data::SamplerConfig sampler(int dp_rank) const;
  optim::AdamWConfig adamw() const;     // train.beta1, beta2, eps, weight_decay
  std::string checkpoint_root() const;  // <out_dir>/checkpoints
  std::string metrics_path() const;     // <out_dir>/metrics.jsonl
  nlohmann::json to_json() const;       // every key, resolved
};

enum class KeyType { Int, Float, String, Bool };

struct KeyInfo {
  std::string name;  // "train.lr"
  KeyType type;
  std::string default_value;  // as TOML would spell it; "" when required or derived
  std::string help;
};

// Every key a run config accepts, [model] included.
const std::vector<KeyInfo>& run_config_keys();

// Parses RUN.toml text, applies overrides ("section.key=value", typed by the key), fills the
// derived defaults and validates the config on its own (validate()).
Result<RunConfig> parse_run_config(const std::string& toml_text, const std::string& origin,
                                   const std::vector<std::string>& overrides = {});
Result<RunConfig> load_run_config(const std::string& path,
                                  const std::vector<std::string>& overrides = {});

// Problems visible from the config alone, in its own terms ("train.global_batch=10 is not
// divisible by train.micro_batch=4").
Status validate(const RunConfig& cfg);

// The trainer's check of the run's layout (`parallel`) with its batch (train.global_batch,
// seq_len): layout::validate, the one rule book the planner applies too, for every device
// (validate() above runs it).
Status validate_layout(const RunConfig& c);

// The process grid: parallel.tp * pp * dp must equal the number of processes started.
Status validate_world(const RunConfig& c, int world_size);

// Problems of the config with its data: the dataset, tokenizer and model vocabularies agree
// (data::check_vocabulary), and the dataset holds one global batch of training windows and
// eval_batches of validation windows. tokenizer_identity "" / tokenizer_vocab 0: no tokenizer.
Status validate_data(const RunConfig& cfg, const data::TokenDataset& dataset,
                     const std::string& tokenizer_identity, int tokenizer_vocab);

}  // namespace weft::config
