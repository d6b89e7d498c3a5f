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
// Rows of the residual stream on this rank: B*T, or B*T/t with sequence parallelism.
int64_t stream_rows(int64_t B, int64_t T, TpShape tp) {
  return tp.sequence_parallel ? B * T / tp.tp : B * T;
}

Shape layer_activation_shape(const std::string& name, const GptConfig& cfg, int64_t B, int64_t T,
                             TpShape tp) {
  const int64_t C = cfg.n_embd, t = tp.tp, Ns = stream_rows(B, T, tp);
  if (name == "qkv") return {B, T, 3 * C / t};
  if (name == "att") return {B, cfg.n_head / t, T, T};
  if (name == "atty") return {B, T, C / t};
  if (name == "fc" || name == "fc_gelu") return {B, T, 4 * C / t};
  if (name.ends_with(".mean") || name.ends_with(".rstd")) return {Ns};
  if (name == "res_attn" || name == "out") return {Ns, C};
  return {B, T, C};  // ln_1, ln_2: gathered
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

BufferLayout gpt_activation_layout(const GptConfig& cfg, int B, int T, Recompute mode, TpShape tp,
                                   StageSpec stage) {
  validate_for_run(cfg, T).throw_if_error("invalid model config");
  validate_tensor_parallel(cfg, tp.tp, tp.sequence_parallel, B, T)
      .throw_if_error("invalid tensor-parallel layout");
  const int64_t C = cfg.n_embd, Ns = stream_rows(B, T, tp);
  BufferLayout a;
  a.add("embed", {Ns, C});
  for (int l = stage.first_layer; l < stage.end_layer(cfg); ++l) {
    for (const auto& n : layer_activation_names()) {
      if (kept_per_layer(n, mode)) {
        a.add("h." + std::to_string(l) + "." + n, layer_activation_shape(n, cfg, B, T, tp));
      }
    }
  }
  for (const auto& n : layer_activation_names()) {
    if (!kept_per_layer(n, mode)) a.add("layer." + n, layer_activation_shape(n, cfg, B, T, tp));
  }
  if (stage.head) {
    a.add("ln_f", {B, T, C});
    a.add("ln_f.mean", {Ns});
    a.add("ln_f.rstd", {Ns});
    a.add("logits", {B, T, cfg.padded_vocab() / tp.tp});
    a.add("losses", {B, T});
    if (tp.tp > 1) {  // the vocabulary-parallel cross-entropy's statistics: this rank's, everyone's
      a.add("ce.stats", {B, T, 3});
      a.add("ce.all", {tp.tp, B, T, 3});
    }
  } else {
    a.add("d.output", {Ns, C});
  }
  if (tp.sequence_parallel && tp.tp > 1) {
    a.add("sp.ln", {Ns, C});
    a.add("sp.partial", {B, T, C});
  }
  return a;
}

BufferLayout gpt_grad_workspace_layout(const GptConfig& cfg, int B, int T, TpShape tp) {
  const int64_t C = cfg.n_embd, t = tp.tp, Ns = stream_rows(B, T, tp);
  BufferLayout w;
  w.add("d.residual", {Ns, C});
  w.add("d.ln", {B, T, C});
  w.add("d.atty", {B, T, C / t});
  w.add("d.qkv", {B, T, 3 * C / t});
  w.add("d.fc", {B, T, 4 * C / t});
  if (tp.sequence_parallel && tp.tp > 1) {
    w.add("d.gathered", {B, T, C});
    w.add("d.ln_local", {Ns, C});
  }
  return w;
}

}  // namespace weft::model
