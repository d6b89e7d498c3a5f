#pragma once
// Checkpoints: parameters, AdamW moments and the trainer's state, saved so that a resumed run
// continues with exactly the losses of an uninterrupted one, under the same or another layout.
//
// Layout (docs/training.md has the full reference):
//   ROOT/step_00000010/metadata.json      model config, parallel layout, optimizer step, trainer
//                                         state, and every tensor piece: name, group, dtype,
//                                         global shape, which tensor-parallel shard and which of
//                                         its elements it holds, file and byte offset
//   ROOT/step_00000010/model-tp0-pp0.bin  parameters (fp32, little-endian, piece after piece);
//                                         ZeRO 1-3 partition them over dp: model-tp0-dp1-pp0.bin
//   ROOT/step_00000010/optim-tp0-dp0-pp0.bin  AdamW m then v
//   ROOT/latest                           "step_00000010": written last, so it always names a
//                                         complete checkpoint
// Every rank of a job writes its own files, in parallel, straight from its buffers, or, for a
// state in another memory (a GPU's), streamed through a bounded host buffer (each element of the
// model exactly once: checkpoint/placement.h says which rank writes what); rank 0 writes the
// metadata. A checkpoint is written into ROOT/step_XXXXXXXX.tmp-<pid>, every file fsynced,
// then renamed into place; each file carries an XXH3-64 checksum in the metadata.
//
// Loading reshards: a reader asks for pieces of its own layout's tensors (ReadPiece) and each
// element is found by its global index in whichever pieces hold it, so a checkpoint loads under
// any tp, pp, dp, vp and ZeRO stage.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/core/status.h"
#include "weft/layout/layout.h"
#include "weft/model/gpt_config.h"
#include "weft/model/param_layout.h"
#include "weft/optim/adamw.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::checkpoint {

// Version 2: pieces of tensor-parallel shards (v1, which held whole tensors only, still loads).
inline constexpr int kFormatVersion = 2;
inline constexpr const char* kMetadataFile = "metadata.json";
inline constexpr const char* kLatestFile = "latest";
// The three parts of a chunk's training state a checkpoint holds, in file order: the parameters
// and AdamW's two moments (placement.h's StateBuffers).
inline constexpr const char* kStateGroups[] = {"params", "adam_m", "adam_v"};
// A shard's XXH3 checksum as metadata.json writes it: 16 lower-case hex digits.
std::string hex64(uint64_t v);

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

// A piece of a tensor: elements [begin, begin + count) of rank tp_rank's tensor-parallel shard
// of the global tensor, whose elements are, in order, model::shard_runs(global_shape, split, tp,
// tp_rank) (a replicated split, or tp = 1: the whole tensor in row-major order). In a checkpoint
// the piece's count floats sit at `offset` bytes in `file`.
struct TensorInfo {
  std::string name;   // "h.0.attn.qkv.weight"
  std::string group;  // "params", "adam_m" or "adam_v"
  std::string dtype = "f32";
  Shape global_shape;
  model::TpSplit split;
  int tp = 1, tp_rank = 0;
  int64_t begin = 0, count = 0;
  std::string file;    // shard file
  int64_t offset = 0;  // in bytes
  Shape shard_shape() const { return model::shard_shape(global_shape, split, tp); }
};

// What a rank writes (save) or wants (load_pieces): a piece and its data, `count` floats, in host
// memory (`data`) or, when data is null, in another memory (a device's) that is copied from or to
// host memory a window at a time: fetch(begin, n, out) copies the piece's elements
// [begin, begin + n) to out, store(begin, n, in) copies in to them. The windows are bounded (the
// writer's staging buffer, load_pieces' read window), so host memory stays O(window), not
// O(state).
struct WritePiece {
  TensorInfo tensor;  // file and offset are filled in by the writer
  const float* data = nullptr;
  std::function<void(int64_t begin, int64_t n, float* out)> fetch;
};
struct ReadPiece {
  TensorInfo tensor;
  float* data = nullptr;
  std::function<void(int64_t begin, int64_t n, const float* in)> store;
};

struct Metadata {
  int version = kFormatVersion;
  model::GptConfig model;
  layout::Layout parallel;  // the writer's; recorded: tp, pp, dp, vp and zero (its shards)
  bool has_optimizer = false;
  optim::AdamWConfig adamw;
  int64_t optimizer_step = 0;
  TrainState train;
  std::vector<ShardInfo> shards;
  std::vector<TensorInfo> tensors;
};

std::string step_dir_name(int64_t step);  // "step_00000010"

// Before a run's first step: ROOT exists (created) and is a writable directory, so a bad
// run.out_dir fails at start-up, not at the first save after save_every steps of work. With
// `clean` (one process of the job), the temporaries of saves whose process is gone
// (step_XXXXXXXX.tmp-<pid>: a save killed by a second Ctrl-C, a crash) are removed; their paths
// are returned, for the log. A temporary whose process still runs on this machine (another job
// saving into the same ROOT) is left alone and is an error.
Result<std::vector<std::string>> prepare_root(const std::string& root, bool clean);

// Writing, in three steps, so that the ranks of a job each write their own files
// (runtime/checkpointing.h runs them over a job; save() below runs them in one process):
//   1. begin_save: one process creates the temporary ROOT/step_XXXXXXXX.tmp-<token> (and ROOT).
//   2. write_rank_files: every rank writes its pieces there, its params into `files.model` and
//      its AdamW moments (groups adam_m, then adam_v) into `files.optim`, each fsynced and
//      checksummed as it streams out of the rank's buffers (a piece without `data` through
//      `staging`, as many windows of staging.size() floats as it takes). A non-finite value fails
//      the write, naming the tensor: a rank's corrupt state must not become the last good
//      checkpoint.
//   3. commit_save: one process writes metadata.json (everything the ranks wrote), fsyncs,
//      renames the directory into place, then ROOT/latest, then removes the oldest checkpoints
//      beyond keep_last (0 keeps all). Returns the checkpoint's directory.
// On failure nothing under ROOT changes except the temporary, which abort_save removes.
Result<std::string> begin_save(const std::string& root, int64_t step, int64_t token);
struct RankFileNames {
  std::string model, optim;
};
// model-tp<t>-pp<p>.bin (ZeRO 0: parameters are the same on every dp rank, dp rank 0 writes
// them) or model-tp<t>-dp<d>-pp<p>.bin (ZeRO 1-3), and optim-tp<t>-dp<d>-pp<p>.bin.
RankFileNames rank_file_names(int zero, int tp_rank, int dp_rank, int pp_rank);
struct RankFiles {
  std::vector<ShardInfo> shards;
  std::vector<TensorInfo> tensors;
};
// The first NaN or infinity in [p, p + n), or null.
const float* first_non_finite(const float* p, int64_t n);
// The files are written past the page cache (O_DIRECT) where the file system allows it, one at a
// time, through a staging buffer of kDirectStageBytes (core/pending_file.h): the host memory a save
// adds.
Result<RankFiles> write_rank_files(const std::string& tmp_dir, const RankFileNames& files,
                                   std::span<const WritePiece> pieces,
                                   std::span<float> staging = {});
// `m` holds every rank's shards and tensors.
Result<std::string> commit_save(const std::string& root, const std::string& tmp_dir,
                                const Metadata& m, int keep_last);
void abort_save(const std::string& tmp_dir);
// RankFiles as JSON, to send to the committing process, and back.
std::string rank_files_to_json(const RankFiles& f);
Result<RankFiles> rank_files_from_json(std::string_view text);

// One process holding the whole model: its parameters (and, when opt is not null, the AdamW
// state) as whole tensors. Returns the new checkpoint directory.
Result<std::string> save(const std::string& root, const model::GptConfig& cfg,
                         const FlatBuffer& params, const optim::AdamW* opt, const TrainState& state,
                         int keep_last = 0);

// Complete checkpoints under ROOT (step_* directories with metadata), oldest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& root);
// The directory ROOT/latest names; nullopt when ROOT has no `latest`; an error when it names
// something that is not there.
Result<std::optional<std::string>> find_latest(const std::string& root);
// Ok when ROOT holds no checkpoint (nor a `latest`): a conversion or an import writes a new root,
// since saving into a run's own root would repoint its `latest` to another step, or replace the
// run's checkpoint of the same step. `what` names the command in the error.
Status check_new_root(const std::string& root, const std::string& what);
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
// Only its size (cheap: before a load decides which files it reads).
Status check_shard_size(const std::string& dir, const ShardInfo& shard);

// Fills every target from checkpoint DIR (its metadata `m`, from read_metadata), resharding:
// each element is copied, by its global index, from whichever piece of the same tensor and group
// holds it. Checks first that the model config equals `expected`, that the checkpoint holds every
// element of every target, and the size and checksum of every file it will read; then that every
// value read is finite. Errors name the file. On an error after the checks, targets may hold part
// of the data. Files are read a bounded window at a time (kLoadWindowFloats), and a target without
// `data` receives its elements through `store`, coalesced into runs of at most that many: host
// memory during a load is O(window) whatever the size of the state.
inline constexpr int64_t kLoadWindowFloats = int64_t{1} << 20;  // 4 MiB
Status load_pieces(const std::string& dir, const Metadata& m, const model::GptConfig& expected,
                   std::span<const ReadPiece> targets);

// One process holding the whole model: params (and, when opt is not null, the AdamW moments and
// step count; and state when not null) from DIR, written under any layout. Nothing is modified
// unless every check of load_pieces passes.
Status load(const std::string& dir, const model::GptConfig& expected, FlatBuffer& params,
            optim::AdamW* opt, TrainState* state);

// The model config as JSON and back (also used by `weft generate` to build the model).
nlohmann::json config_to_json(const model::GptConfig& cfg);
Result<model::GptConfig> config_from_json(const nlohmann::json& j, const std::string& origin);

}  // namespace weft::checkpoint
