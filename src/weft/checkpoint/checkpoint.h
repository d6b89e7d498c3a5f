#pragma once
// Checkpoints: parameters, AdamW moments and the trainer's state, saved so that a resumed run
// continues with exactly the losses of an uninterrupted one.
//
// Layout (docs/training.md has the full reference):
//   ROOT/step_00000010/metadata.json      model config, parallel layout, optimizer step, trainer
//                                         state, and every tensor: name, group, dtype, global
//                                         shape, this shard's start/shape, file and byte offset
//   ROOT/step_00000010/model-tp0-pp0.bin  parameters (fp32, little-endian, tensor after tensor)
//   ROOT/step_00000010/optim-tp0-dp0-pp0.bin  AdamW m then v
//   ROOT/latest                           "step_00000010": written last, so it always names a
//                                         complete checkpoint
// A checkpoint is written into ROOT/step_XXXXXXXX.tmp-<pid>, every file fsynced, then renamed into
// place; each shard file carries an XXH3-64 checksum in the metadata. Shard files are named by the
// process that owns them (tp/dp/pp ranks; parameters are the same on every dp rank), and tensors
// record their global shape and the slice a shard holds, so distributed checkpoints and
// resharding can be added without changing the format. Today only tp=pp=dp=1 is written.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/core/status.h"
#include "weft/model/gpt_config.h"
#include "weft/optim/adamw.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::checkpoint {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kMetadataFile = "metadata.json";
inline constexpr const char* kLatestFile = "latest";

// The parallel layout of the run that wrote the checkpoint, and the writing process's place in it.
struct ParallelLayout {
  int tp = 1, pp = 1, dp = 1, vp = 1, zero = 0;
  int tp_rank = 0, pp_rank = 0, dp_rank = 0;
};

// The learning-rate schedule is a pure function of the step; these are its parameters, recorded so
// a resume with different ones can be noticed.
struct LrScheduleState {
  std::string kind = "warmup_cosine";
  double lr = 0, min_lr = 0;
  int64_t warmup_steps = 0, total_steps = 0;
};

// Everything besides tensors that a resumed run needs to continue exactly.
struct TrainState {
  int64_t step = 0;  // completed optimizer steps
  uint64_t seed = 0;
  int64_t sampler_epoch = 0, sampler_position = 0;
  LrScheduleState lr_schedule;
  std::string tokenizer;           // how to load it: "gpt2", a tokenizer directory, or "none"
  std::string tokenizer_identity;  // BpeTokenizer::identity() ("gpt2", "bpe-<V>-<hash>") or ""
  std::string data_path;
  nlohmann::json run_config = nlohmann::json::object();  // the resolved run config, for the record
};

struct ShardInfo {
  std::string file;  // relative to the checkpoint directory
  int64_t bytes = 0;
  uint64_t xxh3 = 0;  // XXH3_64bits of the whole file
};

struct TensorInfo {
  std::string name;   // "h.0.attn.qkv.weight"
  std::string group;  // "params", "adam_m" or "adam_v"
  std::string dtype = "f32";
  Shape global_shape;
  Shape start, shape;  // the slice this shard holds (the whole tensor when unsharded)
  std::string file;    // shard file
  int64_t offset = 0;  // in bytes
};

struct Metadata {
  int version = kFormatVersion;
  model::GptConfig model;
  ParallelLayout parallel;
  bool has_optimizer = false;
  optim::AdamWConfig adamw;
  int64_t optimizer_step = 0;
  TrainState train;
  std::vector<ShardInfo> shards;
  std::vector<TensorInfo> tensors;
};

std::string step_dir_name(int64_t step);  // "step_00000010"

// Writes ROOT/step_XXXXXXXX (creating ROOT), then ROOT/latest, then removes the oldest checkpoints
// beyond keep_last (0 keeps all). `opt` may be null (weights only). Returns the new directory. On
// failure nothing under ROOT changes except a removed temporary.
Result<std::string> save(const std::string& root, const model::GptConfig& cfg,
                         const FlatBuffer& params, const optim::AdamW* opt, const TrainState& state,
                         int keep_last = 0);

// Complete checkpoints under ROOT (step_* directories with metadata), oldest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& root);
// The directory ROOT/latest names; nullopt when ROOT has no `latest`; an error when it names
// something that is not there.
Result<std::optional<std::string>> find_latest(const std::string& root);
// PATH is a checkpoint directory (holds metadata.json) or a ROOT holding `latest`.
Result<std::string> resolve(const std::string& path);

// Parses and checks DIR/metadata.json (structure, version, shards named by every tensor).
Result<Metadata> read_metadata(const std::string& dir);
// The same for metadata text; problems name `origin`. Any text is either metadata that is
// consistent in itself (every field of its type and range, every tensor inside its shard) or an
// error: the fuzz target tests/fuzz/checkpoint_metadata_fuzz.cc holds it to that.
Result<Metadata> parse_metadata(std::string_view text, std::string_view origin);

// The metadata as written into metadata.json (parse_metadata() reads it back).
nlohmann::json metadata_to_json(const Metadata& m);

// Checks that DIR/shard.file has the recorded size and XXH3 checksum; the error names the file and
// says "truncated or overwritten" or "corrupt".
Status verify_shard(const std::string& dir, const ShardInfo& shard);

// Loads DIR into params (and the optimizer's moments and step count when opt is not null, and
// state when not null) after checking that its model config equals `expected`, that every tensor
// of params' layout is there with its shape, and every shard's size and checksum. Nothing is
// modified unless everything checks out. Errors name the file.
Status load(const std::string& dir, const model::GptConfig& expected, FlatBuffer& params,
            optim::AdamW* opt, TrainState* state);

// The model config as JSON and back (also used by `weft generate` to build the model).
nlohmann::json config_to_json(const model::GptConfig& cfg);
Result<model::GptConfig> config_from_json(const nlohmann::json& j, const std::string& origin);

}  // namespace weft::checkpoint
