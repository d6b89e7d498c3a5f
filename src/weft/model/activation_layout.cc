#include "weft/model/activation_layout.h"

#include <algorithm>

namespace weft::model {

const std::vector<std::string>& layer_activation_names() {
  static const std::vector<std::string> names = {
      "ln_1", "ln_1.mean", "ln_1.rstd", "qkv", "att",     "atty", "res_attn",
      "ln_2", "ln_2.mean", "ln_2.rstd", "fc",  "fc_gelu", "out"};
  return names;
}

namespace {
Shape layer_activation_shape(const std::string& name, const GptConfig& cfg, int64_t B, int64_t T) {
  const int64_t C = cfg.n_embd;
  if (name == "qkv") return {B, T, 3 * C};
  if (name == "att") return {B, cfg.n_head, T, T};
  if (name == "fc" || name == "fc_gelu") return {B, T, 4 * C};
  if (name.ends_with(".mean") || name.ends_with(".rstd")) return {B, T};
  return {B, T, C};
}
}  // namespace

bool kept_per_layer(const std::string& name, Recompute mode) {
  switch (mode) {
    case Recompute::None:
      return true;
    case Recompute::Selective:
      return name != "att";
    case Recompute::Full:
      return name == "out";
  }
  return true;
}

BufferLayout gpt_activation_layout(const GptConfig& cfg, int B, int T, Recompute mode) {
  validate_for_run(cfg, T).throw_if_error("invalid model config");
  const int64_t C = cfg.n_embd;
  BufferLayout a;
  a.add("embed", {B, T, C});
  for (int l = 0; l < cfg.n_layer; ++l) {
    for (const auto& n : layer_activation_names()) {
      if (kept_per_layer(n, mode)) {
        a.add("h." + std::to_string(l) + "." + n, layer_activation_shape(n, cfg, B, T));
      }
    }
  }
  for (const auto& n : layer_activation_names()) {
    if (!kept_per_layer(n, mode)) a.add("layer." + n, layer_activation_shape(n, cfg, B, T));
  }
  a.add("ln_f", {B, T, C});
  a.add("ln_f.mean", {B, T});
  a.add("ln_f.rstd", {B, T});
  a.add("logits", {B, T, cfg.padded_vocab()});
  a.add("losses", {B, T});
  return a;
}

BufferLayout gpt_grad_workspace_layout(const GptConfig& cfg, int B, int T) {
  const int64_t C = cfg.n_embd;
  BufferLayout w;
  w.add("d.residual", {B, T, C});
  w.add("d.ln", {B, T, C});
  w.add("d.atty", {B, T, C});
  w.add("d.qkv", {B, T, 3 * C});
  w.add("d.fc_gelu", {B, T, 4 * C});
  w.add("d.fc", {B, T, 4 * C});
  return w;
}

}  // namespace weft::model
