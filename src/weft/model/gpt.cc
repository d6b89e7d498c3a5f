#include "weft/model/gpt.h"

#include <algorithm>
#include <string>
#include <vector>

#include "weft/core/check.h"
#include "weft/kernels/vocab_parallel_ce.h"
#include "weft/model/activation_layout.h"

namespace weft::model {

namespace {
// The model's buffers are host fp32 (FlatBuffer) and its backend an FP32 one (checked at
// construction), whose Act is float.
using kernels::Act;
Act* A(float* p) { return reinterpret_cast<Act*>(p); }
const Act* A(const float* p) { return reinterpret_cast<const Act*>(p); }
}  // namespace

// Pointers to one layer's activations: into its own slices when kept, else into the scratch.
struct Gpt::LayerActs {
  float *ln_1, *ln_1_mean, *ln_1_rstd, *qkv, *att, *atty, *res_attn;
  float *ln_2, *ln_2_mean, *ln_2_rstd, *fc, *fc_gelu, *out;
};

Gpt::Gpt(const GptConfig& cfg, int B, int T, Recompute recompute, parallel::TensorParallel tp,
         StageSpec stage, int slots, ParamStorage storage, kernels::Backend* backend)
    : cfg_(cfg),
      be_(backend != nullptr ? *backend : kernels::host_fp32()),
      B_(B),
      T_(T),
      recompute_(recompute),
      tp_(tp),
      stage_(stage) {
  Status s = validate_stage(cfg, B, T, stage, slots);
  if (s.ok()) s.merge(validate_tensor_parallel(cfg, tp.size(), tp.sequence_parallel, B, T));
  s.throw_if_error("invalid model config '" + cfg.name + "'");
  WEFT_CHECK(be_.precision() == Precision::FP32 &&
                 be_.attention_saved_floats(B, T, cfg.n_head / tp.size()) ==
                     int64_t{B} * (cfg.n_head / tp.size()) * T * T,
             "model::Gpt runs on an fp32 backend that keeps attention probabilities; ", be_.name(),
             " is not one");
  sp_ = tp.sequence_parallel && tp.size() > 1;
  const TpShape shape{tp.size(), sp_};
  layout_ = gpt_param_layout(cfg_, tp.size(), tp.rank(), stage, storage.unit_align);
  if (storage.model_params) params_ = FlatBuffer(layout_.buffer);
  if (storage.model_grads) grads_ = FlatBuffer(layout_.buffer);
  for (const ParamUnit& u : layout_.units) {
    unit_params_.push_back(storage.model_params ? params_.data() + u.begin : nullptr);
  }
  wte_unit_ = layout_.unit_index("wte");
  wpe_unit_ = layout_.unit_index("wpe");
  ln_f_unit_ = layout_.unit_index("ln_f");
  first_layer_unit_ = layout_.unit_index("h." + std::to_string(stage.first_layer));
  const BufferLayout acts = gpt_activation_layout(cfg_, B, T, recompute, shape, stage);
  for (int i = 0; i < slots; ++i) acts_.emplace_back(acts);
  pending_.resize(slots);
  work_ = FlatBuffer(gpt_grad_workspace_layout(cfg_, B, T, shape));
}

void Gpt::init(uint64_t seed) {
  WEFT_CHECK(params_.size() > 0, "this model's parameters are held by its optimizer: init there");
  init_params(params_, layout_, seed);
}

std::pair<int, int64_t> Gpt::locate(const std::string& name) const {
  const int64_t offset = layout_.buffer.at(name).offset;
  const auto& units = layout_.units;
  const auto it = std::upper_bound(units.begin(), units.end(), offset,
                                   [](int64_t o, const ParamUnit& u) { return o < u.begin; });
  const int u = static_cast<int>(it - units.begin()) - 1;
  return {u, offset - units[u].begin};
}

const float* Gpt::param(const std::string& name) const {
  const auto [u, at] = locate(name);
  WEFT_CHECK(unit_params_[u] != nullptr, "parameter ", name, " read outside a gather of its unit");
  return unit_params_[u] + at;
}

float* Gpt::grad(const std::string& name) {
  const auto [u, at] = locate(name);
  if (hooks_ != nullptr) return hooks_->grads(u) + at;
  WEFT_CHECK(grads_.size() > 0, "this model's gradients are held by its optimizer");
  return grads_.data() + layout_.units[u].begin + at;
}

void Gpt::gather(int unit) {
  if (hooks_ == nullptr || unit < 0) return;
  unit_params_[unit] = hooks_->gather(unit);
}

void Gpt::release(int unit) {
  if (hooks_ == nullptr || unit < 0) return;
  hooks_->release(unit);
  if (params_.size() == 0) unit_params_[unit] = nullptr;
}

Gpt::LayerActs Gpt::layer_acts(FlatBuffer& acts, int l) {
  const std::string own = "h." + std::to_string(l) + ".";
  auto p = [&](const char* name) {
    return acts.ptr((kept_per_layer(name, recompute_) ? own : std::string("layer.")) + name);
  };
  return LayerActs{p("ln_1"), p("ln_1.mean"), p("ln_1.rstd"), p("qkv"),       p("att"),
                   p("atty"), p("res_attn"),  p("ln_2"),      p("ln_2.mean"), p("ln_2.rstd"),
                   p("fc"),   p("fc_gelu"),   p("out")};
}

// ---- the conjugate operators of tensor parallelism, forward and backward side by side ----------
// N = B*T rows; Ns = N/t rows of the residual stream with sequence parallelism, else N.
//
// Entering a column-parallel GEMM (Megatron's f): forward identity, backward all-reduce of the
// input gradient. With sequence parallelism: forward all-gather of the LayerNorm's Ns rows,
// backward reduce-scatter. Leaving a row-parallel GEMM (Megatron's g): forward all-reduce of the
// partial sums, backward identity. With sequence parallelism: forward reduce-scatter, backward
// all-gather.

// f forward: LayerNorm of the Ns local rows of `in`, gathered into full[N,C] under SP.
void Gpt::layernorm_gathered(float* full, float* mean, float* rstd, const float* in, const float* w,
                             const float* b, int N, FlatBuffer& acts) {
  const int C = cfg_.n_embd;
  if (!sp_) {
    be_.layernorm_forward(A(full), mean, rstd, A(in), A(w), A(b), N, C);
    return;
  }
  const int Ns = N / tp_.size();
  float* local = acts.ptr("sp.ln");
  be_.layernorm_forward(A(local), mean, rstd, A(in), A(w), A(b), Ns, C);
  tp_.comm->all_gather(full, local, int64_t{Ns} * C);
}

// g forward: partial[N,C] summed over the tp group into out (N rows, or this rank's Ns under SP).
// Without SP, `partial` and `out` may be the same buffer (all-reduce in place).
void Gpt::reduce_partial(float* out, float* partial, int N) {
  const int64_t C = cfg_.n_embd;
  if (tp_.size() == 1) return;
  if (sp_) {
    tp_.comm->reduce_scatter(out, partial, N / tp_.size() * C);
  } else {
    WEFT_CHECK(out == partial, "without sequence parallelism g reduces in place");
    tp_.comm->all_reduce(out, N * C);
  }
}

// g backward: the gradient of a row-parallel output, d_res (Ns rows), as the full [N,C] every rank
// needs for its GEMM's backward (all-gather under SP; identity otherwise).
const float* Gpt::gather_grad(float* d_res, int N) {
  if (!sp_) return d_res;
  float* full = work_.ptr("d.gathered");
  tp_.comm->all_gather(full, d_res, int64_t{N} / tp_.size() * cfg_.n_embd);
  return full;
}

// f backward: the column-parallel GEMM's input gradient d_partial[N,C] (this rank's heads or
// columns only) summed over the group: in place, or reduce-scattered to Ns rows under SP.
float* Gpt::reduce_grad(float* d_partial, int N) {
  if (tp_.size() == 1) return d_partial;
  if (!sp_) {
    tp_.comm->all_reduce(d_partial, int64_t{N} * cfg_.n_embd);
    return d_partial;
  }
  float* local = work_.ptr("d.ln_local");
  tp_.comm->reduce_scatter(local, d_partial, int64_t{N} / tp_.size() * cfg_.n_embd);
  return local;
}

// One pre-LN transformer block (GPT-2):
//   res_attn = in + attn.proj(attention(attn.qkv(ln_1(in))))
//   out      = res_attn + mlp.proj(gelu(mlp.fc(ln_2(res_attn))))
// On a tp rank: qkv [N,3C/t] and fc [N,4C/t] are its heads and columns; each proj GEMM gives a
// partial sum [N,C] that g reduces. The row-parallel biases are added by tp rank 0 only, so the
// reduction adds each once.
void Gpt::layer_forward(int l, const float* in, const LayerActs& a, FlatBuffer& acts, int B,
                        int T) {
  const int t = tp_.size(), C = cfg_.n_embd, Cl = C / t, NHl = cfg_.n_head / t, N = B * T;
  const int64_t Ns = sp_ ? N / t : N;
  auto w = [&](const char* n) { return param(layer_param(l, n)); };
  auto row_bias = [&](const char* n) { return tp_.rank() == 0 ? w(n) : nullptr; };
  float* partial = sp_ ? acts.ptr("sp.partial") : nullptr;

  layernorm_gathered(a.ln_1, a.ln_1_mean, a.ln_1_rstd, in, w("ln_1.weight"), w("ln_1.bias"), N,
                     acts);
  be_.linear_forward(A(a.qkv), nullptr, A(a.ln_1), A(w("attn.qkv.weight")), A(w("attn.qkv.bias")),
                     N, C, 3 * Cl);
  be_.attention_forward(A(a.atty), a.att, A(a.qkv), B, T, Cl, NHl);
  float* proj = sp_ ? partial : a.res_attn;  // attn.proj output, then the residual sum in place
  be_.linear_forward(A(proj), nullptr, A(a.atty), A(w("attn.proj.weight")),
                     A(row_bias("attn.proj.bias")), N, Cl, C);
  reduce_partial(a.res_attn, proj, N);
  be_.residual_forward(A(a.res_attn), A(a.res_attn), A(in), Ns * C);

  layernorm_gathered(a.ln_2, a.ln_2_mean, a.ln_2_rstd, a.res_attn, w("ln_2.weight"), w("ln_2.bias"),
                     N, acts);
  // fc_gelu = gelu(fc), fc = ln_2 Wfc^T + b
  be_.linear_forward(A(a.fc_gelu), A(a.fc), A(a.ln_2), A(w("mlp.fc.weight")), A(w("mlp.fc.bias")),
                     N, C, 4 * Cl);
  proj = sp_ ? partial : a.out;
  be_.linear_forward(A(proj), nullptr, A(a.fc_gelu), A(w("mlp.proj.weight")),
                     A(row_bias("mlp.proj.bias")), N, 4 * Cl, C);
  reduce_partial(a.out, proj, N);
  be_.residual_forward(A(a.out), A(a.out), A(a.res_attn), Ns * C);
}

const float* Gpt::stage_output(int slot) const {
  WEFT_CHECK(!stage_.head, "the last stage's output is its loss");
  return acts_.at(slot).ptr("h." + std::to_string(stage_.end_layer(cfg_) - 1) + ".out");
}

float Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T, int slot,
                   float loss_scale) {
  WEFT_CHECK(B > 0 && B <= B_ && T > 0 && T <= T_, "forward of ", B, "x", T,
             " exceeds the allocated ", B_, "x", T_);
  WEFT_CHECK(slot >= 0 && slot < slots(), "slot ", slot, " outside the ", slots(), " allocated");
  const int t = tp_.size(), C = cfg_.n_embd, V = cfg_.vocab_size, N = B * T;
  const int64_t Vl = cfg_.padded_vocab() / t, v0 = tp_.rank() * Vl;
  WEFT_CHECK(!sp_ || N % t == 0, "sequence parallelism needs B*T=", N, " divisible by tp=", t);
  FlatBuffer& acts = acts_[slot];
  Pending& p = pending_[slot];
  WEFT_CHECK(!p.weights_due, "slot ", slot, " still owes its deferred weight gradients");
  p.tokens = tokens;
  p.targets = stage_.head ? targets : nullptr;
  p.B = B;
  p.T = T;
  p.valid_targets = 0;
  p.backward_due = false;

  // Embedding. Vocabulary-parallel: each rank looks up its rows (tp rank 0 adds wpe), g sums.
  float* x = acts.ptr("embed");
  if (stage_.embedding) {
    gather(wte_unit_);
    gather(wpe_unit_);
    for (int i = 0; i < N; ++i) {
      WEFT_CHECK(tokens[i] >= 0 && tokens[i] < V, "token ", tokens[i], " at position ", i,
                 " is outside the vocabulary of ", V);
    }
    if (t == 1) {
      be_.embedding_forward(A(x), tokens, A(param("wte")), A(param("wpe")), B, T, C);
    } else {
      float* partial = sp_ ? acts.ptr("sp.partial") : x;
      be_.embedding_forward_shard(A(partial), tokens, A(param("wte")),
                                  tp_.rank() == 0 ? A(param("wpe")) : nullptr, B, T, C,
                                  static_cast<int>(v0), static_cast<int>(Vl));
      reduce_partial(x, partial, N);
    }
    release(wpe_unit_);
    release(wte_unit_);
  }
  for (int l = stage_.first_layer; l < stage_.end_layer(cfg_); ++l) {
    LayerActs a = layer_acts(acts, l);
    gather(layer_unit(l));
    layer_forward(l, x, a, acts, B, T);
    release(layer_unit(l));
    x = a.out;
  }
  p.backward_due = true;
  if (!stage_.head) return 0.0f;

  gather(ln_f_unit_);
  gather(wte_unit_);
  float* lnf = acts.ptr("ln_f");
  layernorm_gathered(lnf, acts.ptr("ln_f.mean"), acts.ptr("ln_f.rstd"), x, param("ln_f.weight"),
                     param("ln_f.bias"), N, acts);
  float* logits = acts.ptr("logits");  // [N, Vl]: this rank's vocabulary columns
  be_.linear_forward(A(logits), nullptr, A(lnf), A(param("wte")), nullptr, N, C,
                     static_cast<int>(Vl));  // tied embedding
  release(wte_unit_);
  release(ln_f_unit_);
  if (targets == nullptr) return 0.0f;

  for (int i = 0; i < N; ++i) {
    WEFT_CHECK(targets[i] < V, "target ", targets[i], " is outside the vocabulary of ", V);
    p.valid_targets += targets[i] >= 0;
  }
  // The losses, and the logits overwritten with the gradient of loss_scale * the mean loss.
  const float dloss = p.valid_targets > 0 ? loss_scale / static_cast<float>(p.valid_targets) : 0.0f;
  float* losses = acts.ptr("losses");
  if (t == 1) {
    be_.softmax_cross_entropy(losses, A(logits), targets, dloss, N, V, static_cast<int>(Vl));
  } else {
    // Vocabulary-parallel (kernels/vocab_parallel_ce.h): three statistics per row gathered over
    // tp, never the logits.
    const int Vv = static_cast<int>(kernels::vocab_ce::real_columns(V, v0, Vl));
    float* stats = acts.ptr("ce.stats");
    float* all = acts.ptr("ce.all");
    be_.cross_entropy_shard_stats(stats, A(logits), targets, N, static_cast<int>(Vl), Vv,
                                  static_cast<int>(v0));
    tp_.comm->all_gather(all, stats, int64_t{kernels::vocab_ce::kStats} * N);
    be_.cross_entropy_shard_finish(losses, A(logits), all, t, targets, dloss, N, V,
                                   static_cast<int>(Vl), Vv, static_cast<int>(v0));
  }
  double sum = 0.0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] >= 0) sum += losses[i];
  }
  return p.valid_targets > 0 ? static_cast<float>(sum / p.valid_targets) : 0.0f;
}

void Gpt::backward(int slot, bool defer_weight_grads) {
  WEFT_CHECK(slot >= 0 && slot < slots(), "slot ", slot, " outside the ", slots(), " allocated");
  Pending& p = pending_[slot];
  WEFT_CHECK(p.backward_due && (!stage_.head || p.targets != nullptr),
             "backward() needs a forward() with targets on slot ", slot);
  WEFT_CHECK(!defer_weight_grads || recompute_ != Recompute::Full,
             "deferred weight gradients need each layer's inputs kept (recompute none or "
             "selective, not full)");
  FlatBuffer& acts = acts_[slot];
  const int B = p.B, T = p.T, N = B * T, t = tp_.size();
  const int C = cfg_.n_embd, Cl = C / t, NHl = cfg_.n_head / t;
  const int64_t Vl = cfg_.padded_vocab() / t, Ns = sp_ ? N / t : N;
  const int first = stage_.first_layer, end = stage_.end_layer(cfg_);
  float* d_res = work_.ptr("d.residual");  // [Ns, C]
  float* d_ln = work_.ptr("d.ln");         // [N, C]
  float* d_atty = work_.ptr("d.atty");
  float* d_qkv = work_.ptr("d.qkv");
  float* d_fc = work_.ptr("d.fc");
  auto w = [&](int l, const char* n) { return param(layer_param(l, n)); };
  auto layer_input = [&](int l) {
    return l == first ? acts.ptr("embed") : acts.ptr("h." + std::to_string(l - 1) + ".out");
  };
  // A linear layer's backward (weight `name`.weight, bias `name`.bias unless `bias` is false): the
  // input gradient now (times gelu'(gelu_pre) when the layer's input was a GeLU's output); the
  // weight and bias gradients now, or (deferred) by backward_weights() from a copy of dout unless
  // the slot keeps dout itself.
  auto linear_backward = [&](float* dinp, const std::string& name, bool bias, const float* dout,
                             const float* inp, const float* gelu_pre, int n, int ic, int oc,
                             bool dout_kept_by_slot) {
    const std::string wname = bias ? name + ".weight" : name, bname = bias ? name + ".bias" : "";
    const float* weight = param(wname);
    if (!defer_weight_grads) {
      be_.linear_backward(A(dinp), grad(wname), bias ? grad(bname) : nullptr, A(dout), A(inp),
                          A(weight), A(gelu_pre), n, ic, oc);
      return;
    }
    be_.linear_backward(A(dinp), nullptr, nullptr, A(dout), A(inp), A(weight), A(gelu_pre), n, ic,
                        oc);
    Deferred d{wname, bname, inp, {}, dout, n, ic, oc};
    if (!dout_kept_by_slot) {
      d.dout_copy.assign(dout, dout + int64_t{n} * oc);
      d.dout = nullptr;
    }
    p.deferred.push_back(std::move(d));
  };
  p.deferred.clear();

  if (stage_.head) {
    // Head: the forward left dlogits in place of the logits; the tied-embedding GEMM and ln_f.
    gather(ln_f_unit_);
    gather(wte_unit_);
    float* logits = acts.ptr("logits");
    linear_backward(d_ln, "wte", false, logits, acts.ptr("ln_f"), nullptr, N, C,
                    static_cast<int>(Vl), /*dout_kept_by_slot=*/true);
    be_.zero(d_res, Ns * C * static_cast<int64_t>(sizeof(float)));
    be_.layernorm_backward(A(d_res), grad("ln_f.weight"), grad("ln_f.bias"),
                           A(reduce_grad(d_ln, N)), A(layer_acts(acts, end - 1).out),
                           A(param("ln_f.weight")), acts.ptr("ln_f.mean"), acts.ptr("ln_f.rstd"),
                           static_cast<int>(Ns), C);
    release(wte_unit_);
    release(ln_f_unit_);
    if (!defer_weight_grads) {
      grads_ready(ln_f_unit_);
      if (!stage_.embedding) grads_ready(wte_unit_);  // else the embedding adds its part below
    }
  } else {
    // The next stage sent the gradient of this stage's output (already scaled by its loss_scale).
    be_.copy(d_res, acts.ptr("d.output"), Ns * C * static_cast<int64_t>(sizeof(float)));
  }

  for (int l = end - 1; l >= first; --l) {
    const float* in = layer_input(l);
    LayerActs a = layer_acts(acts, l);
    gather(layer_unit(l));
    if (recompute_ == Recompute::Full) {
      // Recompute the block into scratch (its collectives too); its output is discarded (h.l.out
      // is kept), so write it to d_ln, which is free until the MLP backward below.
      LayerActs r = a;
      r.out = d_ln;
      layer_forward(l, in, r, acts, B, T);
    } else if (recompute_ == Recompute::Selective) {
      be_.attention_forward(A(a.atty), a.att, A(a.qkv), B, T, Cl, NHl);
    }
    // d_res holds d(out). MLP: out = res_attn + proj(gelu(fc(ln_2(res_attn))))
    const float* d_out = gather_grad(d_res, N);
    linear_backward(d_fc, layer_param(l, "mlp.proj"), true, d_out, a.fc_gelu, a.fc, N, 4 * Cl, C,
                    false);
    linear_backward(d_ln, layer_param(l, "mlp.fc"), true, d_fc, a.ln_2, nullptr, N, C, 4 * Cl,
                    false);
    // the residual branch's gradient is already in d_res; add the LayerNorm branch's
    be_.layernorm_backward(A(d_res), grad(layer_param(l, "ln_2.weight")),
                           grad(layer_param(l, "ln_2.bias")), A(reduce_grad(d_ln, N)),
                           A(a.res_attn), A(w(l, "ln_2.weight")), a.ln_2_mean, a.ln_2_rstd,
                           static_cast<int>(Ns), C);
    // Attention: res_attn = in + proj(attention(qkv(ln_1(in))))
    const float* d_res_attn = gather_grad(d_res, N);
    linear_backward(d_atty, layer_param(l, "attn.proj"), true, d_res_attn, a.atty, nullptr, N, Cl,
                    C, false);
    be_.attention_backward(A(d_qkv), A(d_atty), A(a.qkv), A(a.atty), a.att, B, T, Cl, NHl);
    linear_backward(d_ln, layer_param(l, "attn.qkv"), true, d_qkv, a.ln_1, nullptr, N, C, 3 * Cl,
                    false);
    be_.layernorm_backward(A(d_res), grad(layer_param(l, "ln_1.weight")),
                           grad(layer_param(l, "ln_1.bias")), A(reduce_grad(d_ln, N)), A(in),
                           A(w(l, "ln_1.weight")), a.ln_1_mean, a.ln_1_rstd, static_cast<int>(Ns),
                           C);
    release(layer_unit(l));
    if (!defer_weight_grads) grads_ready(layer_unit(l));
  }
  if (stage_.embedding) {
    // The embedding's gradients are weight gradients too: deferred with a copy of d(embed).
    const float* d_embed = t == 1 ? d_res : gather_grad(d_res, N);
    if (defer_weight_grads) {
      p.d_embed.assign(d_embed, d_embed + int64_t{N} * C);
    } else {
      embedding_weight_grads(p, d_embed);
      grads_ready(wpe_unit_);
      grads_ready(wte_unit_);
    }
  }
  p.backward_due = false;  // the logits are gone; a second backward needs a new forward
  p.weights_due = defer_weight_grads;
  if (!defer_weight_grads && hooks_ != nullptr) hooks_->backward_done();
}

void Gpt::embedding_weight_grads(const Pending& p, const float* d_embed) {
  const int C = cfg_.n_embd, t = tp_.size();
  if (t == 1) {
    be_.embedding_backward(grad("wte"), grad("wpe"), A(d_embed), p.tokens, p.B, p.T, C);
  } else {
    const int Vl = static_cast<int>(cfg_.padded_vocab() / t);
    be_.embedding_backward_shard(grad("wte"), grad("wpe"), A(d_embed), p.tokens, p.B, p.T, C,
                                 tp_.rank() * Vl, Vl);
  }
}

void Gpt::backward_weights(int slot) {
  WEFT_CHECK(slot >= 0 && slot < slots(), "slot ", slot, " outside the ", slots(), " allocated");
  Pending& p = pending_[slot];
  WEFT_CHECK(p.weights_due, "backward_weights() needs a backward() that deferred them, slot ",
             slot);
  for (const Deferred& d : p.deferred) {
    const float* dout = d.dout != nullptr ? d.dout : d.dout_copy.data();
    be_.linear_backward(nullptr, grad(d.dweight), d.dbias.empty() ? nullptr : grad(d.dbias),
                        A(dout), A(d.inp), nullptr, nullptr, d.N, d.IC, d.OC);
  }
  p.deferred.clear();
  if (stage_.embedding) {
    embedding_weight_grads(p, p.d_embed.data());
    p.d_embed.clear();
  }
  p.weights_due = false;
  // Every unit's gradient is complete now (the weight GEMMs need no parameters: nothing gathered).
  for (int u = static_cast<int>(layout_.units.size()) - 1; u >= 0; --u) grads_ready(u);
  if (hooks_ != nullptr) hooks_->backward_done();
}

std::vector<GradPart> Gpt::whole_grads() const {
  WEFT_CHECK(grads_.size() > 0, "this model's gradients are held by its optimizer");
  std::vector<GradPart> parts;
  const auto& slices = layout_.buffer.slices();
  for (size_t i = 0; i < slices.size(); ++i) {
    parts.push_back({i, const_cast<float*>(grads_.data()) + slices[i].offset, slices[i].numel});
  }
  return parts;
}

void Gpt::finish_grad_sync(std::span<const GradPart> parts) {
  if (!sp_) return;
  // One all-reduce for all LayerNorm gradients: pack, reduce, unpack.
  const auto& slices = layout_.buffer.slices();
  std::vector<const GradPart*> norms;
  int64_t total = 0;
  for (const GradPart& g : parts) {
    if (is_layernorm_param(slices[g.slice].name)) {
      norms.push_back(&g);
      total += g.n;
    }
  }
  std::vector<float> packed(total);
  int64_t at = 0;
  for (const GradPart* g : norms) {
    std::copy_n(g->grad, g->n, packed.data() + at);
    at += g->n;
  }
  tp_.comm->all_reduce(packed.data(), total);
  at = 0;
  for (const GradPart* g : norms) {
    std::copy_n(packed.data() + at, g->n, g->grad);
    at += g->n;
  }
}

}  // namespace weft::model
