#pragma once
// The tiny GPT the parallel tests train: 4 heads, a 61-token vocabulary padded to 64 (16 columns
// per rank at tp=4, the last rank's partly padding), positions up to 16.

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

}  // namespace weft::test
