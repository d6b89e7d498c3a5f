#pragma once
// The tiny GPT the parallel tests train: 4 heads, a 61-token vocabulary padded to 64 (16 columns
// per rank at tp=4, the last rank's partly padding), positions up to 16.

#include <string>

#include "weft/model/gpt_config.h"

namespace weft::test {

inline model::GptConfig tiny_gpt(int n_layer = 2, int n_embd = 32) {
  model::GptConfig c;
  c.name = "tiny-" + std::to_string(n_layer) + "l";
  c.n_layer = n_layer;
  c.n_embd = n_embd;
  c.n_head = 4;
  c.vocab_size = 61;
  c.pad_vocab_to = 16;
  c.max_seq_len = 16;
  return c;
}

// The tiny GPT with every modern choice on (model/gpt_config.h; Llama: Touvron et al. 2023):
// rotary positions, RMSNorm, a SwiGLU MLP of width 48 (not 4C), grouped-query attention with 4
// key/value heads for 8 query heads (both split at tp = 1, 2 and 4; heads of 4, even for RoPE),
// an untied LM head, no biases.
inline model::GptConfig tiny_llama(int n_layer = 2) {
  model::GptConfig c = tiny_gpt(n_layer, 32);
  c.name = "tiny-llama-" + std::to_string(n_layer) + "l";
  c.n_head = 8;
  c.n_kv_head = 4;
  c.position = model::Position::Rope;
  c.rope_theta = 500.0f;  // a small base: 16 positions span several turns of the fast pairs
  c.norm = model::NormKind::RMSNorm;
  c.mlp = model::MlpKind::SwiGLU;
  c.ffn_hidden_size = 48;
  c.tie_embeddings = false;
  c.bias = false;
  return c;
}

// A small GPT with heads of 64, the size the CUDA flash attention takes (the GPU trainer's tests,
// which also run on the host emulation), and a vocabulary of 101 padded to 128.
inline model::GptConfig small_gpt_hs64(int n_layer, int max_seq_len) {
  model::GptConfig c;
  c.name = "small-" + std::to_string(n_layer) + "l";
  c.n_layer = n_layer;
  c.n_embd = 128;
  c.n_head = 2;
  c.vocab_size = 101;
  c.pad_vocab_to = 64;
  c.max_seq_len = max_seq_len;
  return c;
}

// small_gpt_hs64 with every modern choice (tiny_llama's): heads of 64, 2 key/value heads for 4
// query heads (split at tp = 2), a SwiGLU MLP of width 320.
inline model::GptConfig small_llama_hs64(int n_layer, int max_seq_len) {
  model::GptConfig c = small_gpt_hs64(n_layer, max_seq_len);
  c.name = "small-llama-" + std::to_string(n_layer) + "l";
  c.n_embd = 256;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.position = model::Position::Rope;
  c.norm = model::NormKind::RMSNorm;
  c.mlp = model::MlpKind::SwiGLU;
  c.ffn_hidden_size = 320;
  c.tie_embeddings = false;
  c.bias = false;
  return c;
}

}  // namespace weft::test
