#include "weft/model/param_layout.h"

#include <cmath>
#include <string>

#include "weft/core/rng.h"

namespace weft::model {

std::string layer_param(int layer, const char* suffix) {
  return "h." + std::to_string(layer) + "." + suffix;
}

ParamLayout gpt_param_layout(const GptConfig& cfg) {
  validate(cfg).throw_if_error("invalid model config");
  const int64_t C = cfg.n_embd, L = cfg.n_layer, Vp = cfg.padded_vocab();
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(L));
  using K = ParamInit::Kind;
  ParamLayout p;
  auto add = [&](const std::string& name, const Shape& shape, ParamInit init) {
    p.buffer.add(name, shape);
    p.init.push_back(init);
  };
  add("wte", {Vp, C}, {K::Normal, 0.02f, true, cfg.vocab_size});
  add("wpe", {cfg.max_seq_len, C}, {K::Normal, 0.01f, true});
  for (int l = 0; l < L; ++l) {
    add(layer_param(l, "ln_1.weight"), {C}, {K::Ones});
    add(layer_param(l, "ln_1.bias"), {C}, {K::Zeros});
    add(layer_param(l, "attn.qkv.weight"), {3 * C, C}, {K::Normal, 0.02f, true});
    add(layer_param(l, "attn.qkv.bias"), {3 * C}, {K::Zeros});
    add(layer_param(l, "attn.proj.weight"), {C, C}, {K::Normal, residual_std, true});
    add(layer_param(l, "attn.proj.bias"), {C}, {K::Zeros});
    add(layer_param(l, "ln_2.weight"), {C}, {K::Ones});
    add(layer_param(l, "ln_2.bias"), {C}, {K::Zeros});
    add(layer_param(l, "mlp.fc.weight"), {4 * C, C}, {K::Normal, 0.02f, true});
    add(layer_param(l, "mlp.fc.bias"), {4 * C}, {K::Zeros});
    add(layer_param(l, "mlp.proj.weight"), {C, 4 * C}, {K::Normal, residual_std, true});
    add(layer_param(l, "mlp.proj.bias"), {C}, {K::Zeros});
  }
  add("ln_f.weight", {C}, {K::Ones});
  add("ln_f.bias", {C}, {K::Zeros});
  return p;
}

void init_params(FlatBuffer& params, const ParamLayout& layout, uint64_t seed) {
  const auto& slices = layout.buffer.slices();
  for (size_t i = 0; i < slices.size(); ++i) {
    const SliceSpec& s = slices[i];
    const ParamInit& init = layout.init[i];
    float* out = params.data() + s.offset;
    switch (init.kind) {
      case ParamInit::Kind::Zeros:
        std::fill(out, out + s.numel, 0.0f);
        break;
      case ParamInit::Kind::Ones:
        std::fill(out, out + s.numel, 1.0f);
        break;
      case ParamInit::Kind::Normal: {
        int64_t live = s.numel;
        if (init.live_rows >= 0) live = init.live_rows * (s.numel / s.shape[0]);
        fill_normal(out, live, stream_key(seed, s.name), 0, 0.0f, init.std);
        std::fill(out + live, out + s.numel, 0.0f);
        break;
      }
    }
  }
}

}  // namespace weft::model
