#pragma once
// The parameters of a GPT-2 model: names, shapes, initialization and weight-decay flags, in the
// order they sit in the flat parameter buffer. Names follow GPT-2's module tree
// ("h.3.attn.qkv.weight"). Linear weights are stored [out, in] (as torch.nn.Linear).

#include <cstdint>
#include <string>
#include <vector>

#include "weft/model/gpt_config.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::model {

struct ParamInit {
  enum class Kind { Normal, Zeros, Ones } kind = Kind::Zeros;
  float std = 0.0f;
  bool weight_decay = false;  // AdamW decays matrices and embeddings, not biases or LayerNorm
  int64_t live_rows = -1;     // rows beyond this stay zero (vocabulary padding of wte); -1: all
};

struct ParamLayout {
  BufferLayout buffer;
  std::vector<ParamInit> init;  // parallel to buffer.slices()
  int64_t count() const { return buffer.numel(); }
  std::vector<bool> weight_decay_flags() const {  // one per slice
    std::vector<bool> f;
    for (const auto& i : init) f.push_back(i.weight_decay);
    return f;
  }
};

// Per-layer names, so model code and tests spell them once.
std::string layer_param(int layer, const char* suffix);  // layer_param(3, "ln_1.weight")

ParamLayout gpt_param_layout(const GptConfig& cfg);

// GPT-2 initialization (Radford et al. 2019; nanoGPT): N(0, 0.02) for matrices and wte, N(0, 0.01)
// for wpe, N(0, 0.02/sqrt(2L)) for the residual projections (attn.proj, mlp.proj), zero biases,
// LayerNorm weight 1. Element i of parameter `name` is normal_at(stream_key(seed, name), i): the
// value depends only on (seed, name, global index), whatever the layout.
void init_params(FlatBuffer& params, const ParamLayout& layout, uint64_t seed);

}  // namespace weft::model
