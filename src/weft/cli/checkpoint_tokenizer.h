#pragma once
// Which tokenizer a checkpoint's model reads, for `weft generate` and `weft ckpt export-hf`:
// the --tokenizer a user gives; else the one the checkpoint records ("gpt2" or the directory the
// run was given), when it is still there; else the run's own copy, which the trainer keeps beside
// the checkpoints (CHECKPOINT_ROOT/tokenizer, runtime/trainer.h), so that a run directory moved
// to another machine still generates. The identity the checkpoint records must match.

#include <optional>
#include <string>

#include "weft/checkpoint/checkpoint.h"
#include "weft/data/bpe_tokenizer.h"

namespace weft::cli {

struct CheckpointTokenizer {
  std::string dir;  // "" when the model was trained on ids alone
  std::optional<data::BpeTokenizer> tokenizer;
};

// Errors name the places tried and --tokenizer.
CheckpointTokenizer load_checkpoint_tokenizer(const std::string& checkpoint_dir,
                                              const checkpoint::Metadata& md,
                                              const std::string& override_spec);

}  // namespace weft::cli
