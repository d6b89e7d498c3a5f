#include "weft/model/activation_layout.h"

#include <algorithm>

namespace weft::model {

const std::vector<std::string>& layer_activation_names() {
  static const std::vector<std::string> names = {
      "ln_1", "ln_1.mean", "ln_1.rstd", "qkv", "att",    "atty", "res_attn",
      "ln_2", "ln_2.mean", "ln_2.rstd", "fc",  "fc_act", "out"};
  return names;
}

bool is_fp32_activation(const std::string& name) {
  return name == "att" || name.ends_with(".mean") || name.ends_with(".rstd");
}

Shape attention_state_shape(int64_t B, int64_t T, int64_t heads, Precision precision) {
  if (precision == Precision::FP32) return {B, heads, T, T};
  return {B, heads, T};
}

namespace {
// Rows of the residual stream on this rank: B*T, or B*T/t with sequence parallelism.
int64_t stream_rows(int64_t B, int64_t T, TpShape tp) {
  return tp.sequence_parallel && tp.tp > 1 ? B * T / tp.tp : B * T;
}

Shape layer_activation_shape(const std::string& name, const GptConfig& cfg, int64_t B, int64_t T,
                             TpShape tp, Precision precision) {
  const int64_t C = cfg.n_embd, t = tp.tp, Ns = stream_rows(B, T, tp);
  if (name == "qkv") return {B, T, cfg.qkv_width() / t};
  if (name == "att") return attention_state_shape(B, T, cfg.n_head / t, precision);
  if (name == "atty") return {B, T, C / t};
  if (name == "fc") return {B, T, cfg.fc_width() / t};
  if (name == "fc_act") return {B, T, cfg.ffn() / t};
  if (name.ends_with(".mean") || name.ends_with(".rstd")) return {Ns};
  if (name == "res_attn" || name == "out") return {Ns, C};
  return {B, T, C};  // ln_1, ln_2: gathered
}

// Appends a layer tensor to the block of its element type.
void add_layer_tensor(ActivationLayout& a, const std::string& slice, const std::string& name,
                      const Shape& shape) {
  (is_fp32_activation(name) ? a.f32 : a.act).add(slice, shape);
}
}  // namespace

bool has_layer_activation(const GptConfig& cfg, const std::string& name) {
  return !(cfg.rms_norm() && name.ends_with(".mean"));  // RMSNorm subtracts no mean
}

bool kept_per_layer(const std::string& name, Recompute mode, Precision precision) {
  if (mode == Recompute::Full) return name == "out";
  // Selective: all but fp32 attention's [B,NH,T,T] probabilities.
  return mode == Recompute::None || name != "att" || precision != Precision::FP32;
}

ActivationLayout gpt_activation_layout(const GptConfig& cfg, int B, int T, Recompute mode,
                                       TpShape tp, StageSpec stage, Precision precision) {
  validate_for_run(cfg, T).throw_if_error("invalid model config");
  validate_tensor_parallel(cfg, tp.tp, tp.sequence_parallel, B, T)
      .throw_if_error("invalid tensor-parallel layout");
  const int64_t C = cfg.n_embd, Ns = stream_rows(B, T, tp);
  ActivationLayout a;
  a.act.add("embed", {Ns, C});
  const int end = stage.end_layer(cfg);
  for (int l = stage.first_layer; l < end; ++l) {
    for (const auto& n : layer_activation_names()) {
      // The last layer's output is the head's input (kept for ln_f's backward) or the stage's
      // output, which goes to a send buffer (runtime/pipeline_runner.h): backward never reads it.
      if ((n == "out" && l == end - 1 && !stage.head) || !has_layer_activation(cfg, n)) continue;
      if (kept_per_layer(n, mode, precision)) {
        add_layer_tensor(a, "h." + std::to_string(l) + "." + n, n,
                         layer_activation_shape(n, cfg, B, T, tp, precision));
      }
    }
  }
  if (stage.head) {
    a.act.add("ln_f", {B, T, C});
    if (!cfg.rms_norm()) a.f32.add("ln_f.mean", {Ns});
    a.f32.add("ln_f.rstd", {Ns});
    a.act.add("logits", {B, T, cfg.padded_vocab() / tp.tp});
    a.f32.add("losses", {B, T});
    if (tp.tp > 1) {  // the vocabulary-parallel cross-entropy's statistics: this rank's, everyone's
      a.f32.add("ce.stats", {B, T, 3});
      a.f32.add("ce.all", {tp.tp, B, T, 3});
    }
  }
  return a;
}

ActivationLayout gpt_workspace_layout(const GptConfig& cfg, int B, int T, Recompute mode,
                                      TpShape tp, StageSpec stage, Precision precision) {
  const int64_t C = cfg.n_embd, t = tp.tp, Ns = stream_rows(B, T, tp);
  const bool sp = tp.sequence_parallel && t > 1;
  ActivationLayout w;
  w.act.add("d.residual", {Ns, C});
  w.act.add("d.ln", {B, T, C});
  w.act.add("d.atty", {B, T, C / t});
  w.act.add("d.qkv", {B, T, cfg.qkv_width() / t});
  w.act.add("d.fc", {B, T, cfg.fc_width() / t});
  if (cfg.mlp == MlpKind::SwiGLU) w.act.add("d.fc_act", {B, T, cfg.ffn() / t});
  if (sp) {
    w.act.add("d.gathered", {B, T, C});
    w.act.add("d.ln_local", {Ns, C});
    w.act.add("sp.ln", {Ns, C});
    w.act.add("sp.partial", {B, T, C});
  }
  for (const auto& n : layer_activation_names()) {
    if (!kept_per_layer(n, mode, precision) && has_layer_activation(cfg, n)) {
      add_layer_tensor(w, "layer." + n, n, layer_activation_shape(n, cfg, B, T, tp, precision));
    }
  }
  w.f32.add("tokens", {B, T});
  w.f32.add("targets", {B, T});
  if (sp) {
    const int64_t layers = stage.end_layer(cfg) - stage.first_layer;
    const int64_t norm = cfg.norm_bias() ? 2 * C : C;  // a norm's weight, and its bias
    w.f32.add("ln.packed", {layers * 2 * norm + (stage.head ? norm : 0)});
  }
  return w;
}

int64_t deferred_grad_elements(const GptConfig& cfg, int B, int T, TpShape tp,
                               const StageSpec& stage) {
  const int64_t N = int64_t{B} * T, C = cfg.n_embd, t = tp.tp;
  const int64_t layers = stage.end_layer(cfg) - stage.first_layer;
  return layers * N * ((cfg.qkv_width() + cfg.fc_width()) / t + 2 * C) +
         (stage.embedding ? N * C : 0);
}

}  // namespace weft::model
