#pragma once
// GPT architecture hyperparameters, loaded from TOML and validated before anything is allocated.
// The defaults are GPT-2's (Radford et al. 2019): learned positions, LayerNorm, a GeLU MLP of 4C,
// one key/value head per query head, tied embeddings, biases. Each modern choice is one key of
// its own (Llama: Touvron et al. 2023; Megatron-Core's GPT flags): rotary positions, RMSNorm, a
// SwiGLU MLP, grouped-query attention, untied embeddings, no biases.

#include <cstdint>
#include <string>
#include <tuple>

#include "weft/core/status.h"

namespace weft::model {

enum class Position { Learned, Rope };
enum class NormKind { LayerNorm, RMSNorm };
enum class MlpKind { Gelu, SwiGLU };
const char* position_name(Position p);
const char* norm_name(NormKind n);
const char* mlp_name(MlpKind m);

struct GptConfig {
  std::string name = "gpt";
  int n_layer = 0;         // L
  int n_embd = 0;          // C
  int n_head = 0;          // NH
  int vocab_size = 0;      // V: tokens the tokenizer can produce
  int pad_vocab_to = 128;  // Vp = V rounded up to a multiple of this (GEMM-friendly; tp-divisible)
  int max_seq_len = 0;     // the longest sequence (the learned position table's size)
  Position position = Position::Learned;
  float rope_theta = 10000.0f;  // RoPE's base (Su et al. 2021); Llama 3 uses 500000
  NormKind norm = NormKind::LayerNorm;
  float norm_eps = 1e-5f;
  MlpKind mlp = MlpKind::Gelu;
  int ffn_hidden_size = 0;     // F, the MLP's inner width; 0: 4*n_embd
  int n_kv_head = 0;           // NKV key/value heads (grouped-query attention); 0: n_head
  bool tie_embeddings = true;  // the LM head reads wte; false: a head of its own, lm_head
  bool bias = true;            // biases in the linear layers and LayerNorms

  int head_size() const { return n_embd / n_head; }                               // HS
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }             // NKV
  int ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * n_embd; }  // F
  // Columns of the fused attn.qkv output: q (NH heads), k and v (NKV heads each).
  int64_t qkv_width() const { return int64_t{n_embd} + 2 * int64_t{kv_heads()} * head_size(); }
  // Columns of mlp.fc's output: F, or 2F for SwiGLU (gate and up, fused).
  int64_t fc_width() const { return mlp == MlpKind::SwiGLU ? 2 * int64_t{ffn()} : ffn(); }
  bool rope() const { return position == Position::Rope; }
  bool rms_norm() const { return norm == NormKind::RMSNorm; }
  // Whether the norms have a bias: LayerNorm's with `bias`, RMSNorm's never.
  bool norm_bias() const { return bias && !rms_norm(); }
  // Every number the model's tensors depend on (not the name, nor rope_theta and norm_eps, which
  // change values, not shapes): the key of the caches of layouts and ceilings.
  auto shape_key() const {
    return std::make_tuple(n_layer, n_embd, n_head, padded_vocab(), max_seq_len,
                           static_cast<int>(position), static_cast<int>(norm),
                           static_cast<int>(mlp), ffn(), kv_heads(), tie_embeddings, bias);
  }
  int padded_vocab() const {  // Vp; in int64 until rounded (validate: the result fits an int)
    return static_cast<int>((int64_t{vocab_size} + pad_vocab_to - 1) / pad_vocab_to * pad_vocab_to);
  }
  bool operator==(const GptConfig&) const = default;  // every key
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
// max_seq_len, position, rope_theta, norm, norm_eps, mlp, ffn_hidden_size, n_kv_head,
// tie_embeddings, bias); unknown keys are errors that suggest the nearest known key. Validated.
Result<GptConfig> parse_gpt_config(const std::string& toml_text, const std::string& origin);
Result<GptConfig> load_gpt_config(const std::string& path);

}  // namespace weft::model
