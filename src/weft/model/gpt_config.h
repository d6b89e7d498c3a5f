#pragma once
// GPT-2 architecture hyperparameters, loaded from TOML and validated before anything is allocated.

#include <cstdint>
#include <string>

#include "weft/core/status.h"

namespace weft::model {

struct GptConfig {
  std::string name = "gpt";
  int n_layer = 0;         // L
  int n_embd = 0;          // C
  int n_head = 0;          // NH
  int vocab_size = 0;      // V: tokens the tokenizer can produce
  int pad_vocab_to = 128;  // Vp = V rounded up to a multiple of this (GEMM-friendly; tp-divisible)
  int max_seq_len = 0;     // size of the learned position table

  int head_size() const { return n_embd / n_head; }  // HS
  int padded_vocab() const {  // Vp; in int64 until rounded (validate: the result fits an int)
    return static_cast<int>((int64_t{vocab_size} + pad_vocab_to - 1) / pad_vocab_to * pad_vocab_to);
  }
};

// Every problem at once, in the user's terms ("n_embd=768 is not divisible by n_head=5").
Status validate(const GptConfig& cfg);
// Also checks a run's sequence length against the position table.
Status validate_for_run(const GptConfig& cfg, int seq_len);

// Can tensor parallelism of size tp split this model? Heads (and so n_embd and 4*n_embd) and the
// padded vocabulary must divide by tp; with sequence parallelism also the B*T rows of a
// microbatch (B, T > 0 only when known). Every problem at once, in the user's terms.
Status validate_tensor_parallel(const GptConfig& cfg, int tp, bool sequence_parallel = false,
                                int B = 0, int T = 0);

// Parses a [model] table (keys: name, n_layer, n_embd, n_head, vocab_size, pad_vocab_to,
// max_seq_len); unknown keys are errors that suggest the nearest known key. Validated.
Result<GptConfig> parse_gpt_config(const std::string& toml_text, const std::string& origin);
Result<GptConfig> load_gpt_config(const std::string& path);

}  // namespace weft::model
