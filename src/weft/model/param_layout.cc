#include "weft/model/param_layout.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <string>

#include "weft/core/check.h"
#include "weft/core/rng.h"

namespace weft::model {

std::string layer_param(int layer, const char* suffix) {
  return "h." + std::to_string(layer) + "." + suffix;
}

std::pair<int64_t, int64_t> TpSplit::part_rows(int b, int64_t rows) const {
  if (weights[0] == 0) return {b * (rows / blocks), rows / blocks};
  int64_t total = 0, first = 0;
  for (int i = 0; i < blocks; ++i) total += weights[i];
  for (int i = 0; i < b; ++i) first += weights[i];
  return {rows / total * first, rows / total * weights[b]};
}

std::vector<ShardRun> shard_runs(const Shape& global, TpSplit split, int tp, int rank,
                                 int64_t begin, int64_t end) {
  const int64_t total = numel(global);
  const bool whole = split.replicated() || tp == 1;
  if (end < 0) end = whole ? total : total / tp;
  std::vector<ShardRun> runs;
  auto add = [&](int64_t local, int64_t global_offset, int64_t n) {  // clipped to [begin, end)
    const int64_t a = std::max(local, begin), b = std::min(local + n, end);
    if (a < b) runs.push_back({a - begin, global_offset + (a - local), b - a});
  };
  if (whole) {
    add(0, 0, total);
    return runs;
  }
  WEFT_CHECK(split.dim < static_cast<int>(global.size()), "split dim ", split.dim, " of a ",
             global.size(), "-d tensor");
  if (split.dim == 0) {
    // [R, cols]: each of the `blocks` row blocks contributes rows [rank*r, (rank+1)*r) of itself
    // (r: its rows / tp), one after the other in the shard.
    const int64_t cols = total / global[0];
    int64_t local = 0;
    for (int b = 0; b < split.blocks; ++b) {
      const auto [first, rows] = split.part_rows(b, global[0]);
      const int64_t r = rows / tp;
      add(local * cols, (first + rank * r) * cols, r * cols);
      local += r;
    }
  } else {
    // [R, K]: every row contributes columns [rank*k, (rank+1)*k); only the rows the range meets.
    const int64_t R = global[0], K = global[1], k = K / tp;
    for (int64_t i = begin / k; i < R && i * k < end; ++i) add(i * k, i * K + rank * k, k);
  }
  return runs;
}

Shape shard_shape(const Shape& global, TpSplit split, int tp) {
  Shape s = global;
  if (!split.replicated()) s[split.dim] /= tp;
  return s;
}

StageSpec pipeline_stage(const GptConfig& cfg, int s, int S) {
  validate_pipeline(cfg, S, 1).throw_if_error("invalid pipeline layout");
  WEFT_CHECK(s >= 0 && s < S, "stage ", s, " outside ", S, " stages");
  const int per = cfg.n_layer / S;
  return StageSpec{s * per, per, s == 0, s == S - 1};
}

Status validate_stage(const GptConfig& cfg, int B, int T, const StageSpec& stage, int slots) {
  Status s = validate_for_run(cfg, T);
  if (B <= 0) s.add("batch size " + std::to_string(B) + " must be > 0");
  if (slots < 1) s.add("a model needs at least one activation slot, got " + std::to_string(slots));
  if (s.ok() && (stage.first_layer < 0 || stage.end_layer(cfg) > cfg.n_layer ||
                 stage.end_layer(cfg) <= stage.first_layer)) {
    s.add("stage layers [" + std::to_string(stage.first_layer) + ", " +
          std::to_string(stage.end_layer(cfg)) + ") are not a run of the model's " +
          std::to_string(cfg.n_layer) + " layers");
  }
  return s;
}

Status validate_pipeline(const GptConfig& cfg, int pp, int vp) {
  Status s;
  if (pp < 1) s.add(fmt::format("parallel.pp={} must be >= 1", pp));
  if (vp < 1) s.add(fmt::format("parallel.vp={} must be >= 1", vp));
  if (s.ok() && cfg.n_layer > 0 && cfg.n_layer % (int64_t{pp} * vp) != 0) {
    s.add(fmt::format("n_layer={} does not split into pp*vp = {}*{} = {} stages of equal size",
                      cfg.n_layer, pp, vp, int64_t{pp} * vp));
  }
  return s;
}

bool is_layernorm_param(const std::string& name) {
  return name.starts_with("ln_f.") || name.find(".ln_1.") != std::string::npos ||
         name.find(".ln_2.") != std::string::npos;
}

int ParamLayout::unit_index(const std::string& name) const {
  const auto it = std::ranges::find(units, name, &optim::ParamUnit::name);
  return it == units.end() ? -1 : static_cast<int>(it - units.begin());
}

ParamLayout gpt_param_layout(const GptConfig& cfg, int tp, int tp_rank, StageSpec stage,
                             int64_t unit_align) {
  validate(cfg).throw_if_error("invalid model config");
  validate_tensor_parallel(cfg, tp).throw_if_error("invalid tensor-parallel layout");
  WEFT_CHECK(tp_rank >= 0 && tp_rank < tp, "tp rank ", tp_rank, " outside tp=", tp);
  const int64_t C = cfg.n_embd, L = cfg.n_layer, Vp = cfg.padded_vocab(), F = cfg.ffn();
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(L));
  using K = ParamInit::Kind;
  const TpSplit rep{}, rows{0}, cols{1};
  const TpSplit qkv{0, 3, {cfg.n_head, cfg.kv_heads(), cfg.kv_heads()}};
  const TpSplit fc = cfg.mlp == MlpKind::SwiGLU ? TpSplit{0, 2} : rows;  // [gate; up]
  ParamLayout p;
  p.tp = tp;
  p.tp_rank = tp_rank;
  p.unit_align = unit_align;
  auto add = [&](const std::string& name, const Shape& shape, ParamInit init, TpSplit split,
                 int64_t align = BufferLayout::kAlignElems) {
    p.init.push_back(init);
    p.global_shapes.push_back(shape);
    p.splits.push_back(split);
    return p.buffer.add(name, shard_shape(shape, split, tp), align);
  };
  // Starts a unit: its first slice goes on a unit boundary; the previous unit ends there.
  auto unit = [&](const std::string& name, const std::string& first, const Shape& shape,
                  ParamInit init, TpSplit split) {
    const size_t slice = p.buffer.slices().size();
    p.units.push_back({name, slice, 0, add(first, shape, init, split, unit_align), 0});
  };
  const bool tied = cfg.tie_embeddings;
  if (stage.embedding || (stage.head && tied)) {
    unit("wte", "wte", {Vp, C}, {K::Normal, 0.02f, true, cfg.vocab_size}, rows);
  }
  if (stage.embedding && !cfg.rope()) {
    unit("wpe", "wpe", {cfg.max_seq_len, C}, {K::Normal, 0.01f, true}, rep);
  }
  // A norm's weight, and its bias where it has one.
  auto norm = [&](const std::string& weight, const std::string& bias) {
    add(weight, {C}, {K::Ones}, rep);
    if (cfg.norm_bias()) add(bias, {C}, {K::Zeros}, rep);
  };
  auto bias = [&](const std::string& name, int64_t n, TpSplit split) {
    if (cfg.bias) add(name, {n}, {K::Zeros}, split);
  };
  for (int l = stage.first_layer; l < stage.end_layer(cfg); ++l) {
    unit("h." + std::to_string(l), layer_param(l, "ln_1.weight"), {C}, {K::Ones}, rep);
    if (cfg.norm_bias()) add(layer_param(l, "ln_1.bias"), {C}, {K::Zeros}, rep);
    add(layer_param(l, "attn.qkv.weight"), {cfg.qkv_width(), C}, {K::Normal, 0.02f, true}, qkv);
    bias(layer_param(l, "attn.qkv.bias"), cfg.qkv_width(), qkv);
    add(layer_param(l, "attn.proj.weight"), {C, C}, {K::Normal, residual_std, true}, cols);
    bias(layer_param(l, "attn.proj.bias"), C, rep);
    norm(layer_param(l, "ln_2.weight"), layer_param(l, "ln_2.bias"));
    add(layer_param(l, "mlp.fc.weight"), {cfg.fc_width(), C}, {K::Normal, 0.02f, true}, fc);
    bias(layer_param(l, "mlp.fc.bias"), cfg.fc_width(), fc);
    add(layer_param(l, "mlp.proj.weight"), {C, F}, {K::Normal, residual_std, true}, cols);
    bias(layer_param(l, "mlp.proj.bias"), C, rep);
  }
  if (stage.head) {
    unit("ln_f", "ln_f.weight", {C}, {K::Ones}, rep);
    if (cfg.norm_bias()) add("ln_f.bias", {C}, {K::Zeros}, rep);
    if (!tied) unit("lm_head", "lm_head", {Vp, C}, {K::Normal, 0.02f, true, cfg.vocab_size}, rows);
  }
  p.buffer.pad_to(unit_align);
  const auto& slices = p.buffer.slices();
  for (size_t u = 0; u < p.units.size(); ++u) {
    optim::ParamUnit& pu = p.units[u];
    pu.end_slice = u + 1 < p.units.size() ? p.units[u + 1].first_slice : slices.size();
    pu.end = slices[pu.end_slice - 1].offset + slices[pu.end_slice - 1].numel;
  }
  return p;
}

void init_slice(const ParamLayout& layout, size_t slice, uint64_t seed, int64_t begin, int64_t n,
                float* out) {
  const SliceSpec& s = layout.buffer.slices()[slice];
  const ParamInit& init = layout.init[slice];
  if (init.kind != ParamInit::Kind::Normal) {
    std::fill(out, out + n, init.kind == ParamInit::Kind::Ones ? 1.0f : 0.0f);
    return;
  }
  // Global elements at or beyond `live` (padding rows) stay zero.
  const Shape& g = layout.global_shapes[slice];
  int64_t live = numel(g);
  if (init.live_rows >= 0) live = init.live_rows * (live / g[0]);
  const uint64_t key = stream_key(seed, s.name);
  for (const ShardRun& r : layout.runs(slice, begin, begin + n)) {
    const int64_t normal = std::clamp<int64_t>(live - r.global, 0, r.n);
    fill_normal(out + r.local, normal, key, static_cast<uint64_t>(r.global), 0.0f, init.std);
    std::fill(out + r.local + normal, out + r.local + r.n, 0.0f);
  }
}

void init_params(FlatBuffer& params, const ParamLayout& layout, uint64_t seed) {
  const auto& slices = layout.buffer.slices();
  for (size_t i = 0; i < slices.size(); ++i) {
    init_slice(layout, i, seed, 0, slices[i].numel, params.data() + slices[i].offset);
  }
}

}  // namespace weft::model
