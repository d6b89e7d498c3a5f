#include "weft/model/mixed_gpt.h"

#include <algorithm>
#include <string>

#include "weft/core/check.h"
#include "weft/core/status.h"

namespace weft::model {
namespace {

// Allocates mixed_layout.h's buffers from the backend (the memory model counts the same list).
struct Allocator {
  kernels::Backend& backend;
  template <typename T>
  T* take(int64_t n, BufferKind) {
    return backend.allocate<T>(n);
  }
};

}  // namespace

MixedGpt::MixedGpt(kernels::Backend& backend, const GptConfig& cfg, int B, int T, StageSpec stage,
                   int slots, Recompute recompute, comm::Communicator* tp)
    : backend_(backend),
      cfg_(cfg),
      B_(B),
      T_(T),
      stage_(stage),
      recompute_(recompute),
      tp_(tp),
      t_(tp != nullptr ? tp->size() : 1),
      r_(tp != nullptr ? tp->rank() : 0) {
  Status s = validate_stage(cfg, B, T, stage, slots);
  if (s.ok()) s.merge(validate_tensor_parallel(cfg, t_, false, B, T));
  if (s.ok() && !backend.attention_supports(cfg.n_embd, cfg.n_head)) {
    s.add("the " + backend.name() + " attention kernel does not take heads of size " +
          std::to_string(cfg.n_embd / cfg.n_head) + " (n_embd " + std::to_string(cfg.n_embd) +
          " / n_head " + std::to_string(cfg.n_head) + "); it takes 64 and 128");
  }
  s.throw_if_error("invalid model config '" + cfg.name + "' for " + backend.name());
  layout_ = gpt_param_layout(cfg_, t_, r_, stage_);
  slots_.resize(slots);
  Allocator alloc{backend_};
  lay_out_mixed(alloc, cfg_, layout_.buffer.total(), B, T, stage_, recompute_, t_, b_, slots_);
  losses_host_.resize(static_cast<size_t>(B) * T);
  // Padding between slices is never written by a kernel: zero it once, so sums over the whole
  // buffers (the gradient norm) and the AdamW pass see zeros there.
  const int64_t n = layout_.buffer.total();
  backend_.zero(b_.params, n * 4);
  backend_.zero(b_.params16, n * 2);
  backend_.zero(b_.grads, n * 4);
  for (int l = stage_.first_layer; l < stage_.end_layer(cfg_); ++l) {
    auto w = [&](const char* name) { return w16(layer_param(l, name)); };
    auto g = [&](const char* name) { return g32(layer_param(l, name)); };
    weights_.push_back(Weights{
        w("ln_1.weight"),      w("ln_1.bias"),      w("attn.qkv.weight"), w("attn.qkv.bias"),
        w("attn.proj.weight"), w("attn.proj.bias"), w("ln_2.weight"),     w("ln_2.bias"),
        w("mlp.fc.weight"),    w("mlp.fc.bias"),    w("mlp.proj.weight"), w("mlp.proj.bias"),
        g("ln_1.weight"),      g("ln_1.bias"),      g("attn.qkv.weight"), g("attn.qkv.bias"),
        g("attn.proj.weight"), g("attn.proj.bias"), g("ln_2.weight"),     g("ln_2.bias"),
        g("mlp.fc.weight"),    g("mlp.fc.bias"),    g("mlp.proj.weight"), g("mlp.proj.bias")});
  }
}

void MixedGpt::init(uint64_t seed) {
  FlatBuffer host(layout_.buffer);
  init_params(host, layout_, seed);
  set_params({host.data(), static_cast<size_t>(host.size())});
}

void MixedGpt::set_params(std::span<const float> host) {
  const int64_t n = layout_.buffer.total();
  WEFT_CHECK(static_cast<int64_t>(host.size()) == n, "set_params: ", host.size(),
             " values for a layout of ", n);
  backend_.upload(b_.params, host.data(), n * 4);
  backend_.convert(reinterpret_cast<Act*>(b_.params16), b_.params, n);
}

void MixedGpt::get_params(std::span<float> host) const {
  const int64_t n = layout_.buffer.total();
  WEFT_CHECK(static_cast<int64_t>(host.size()) == n, "get_params: room for ", host.size(),
             " values, the layout has ", n);
  backend_.download(host.data(), b_.params, n * 4);
}

void MixedGpt::get_grads(std::span<float> host) const {
  const int64_t n = layout_.buffer.total();
  WEFT_CHECK(static_cast<int64_t>(host.size()) == n, "get_grads: room for ", host.size(),
             " values, the layout has ", n);
  backend_.download(host.data(), b_.grads, n * 4);
}

void MixedGpt::zero_grad() { backend_.zero(b_.grads, layout_.buffer.total() * 4); }

void MixedGpt::sum_over_tp(Act* x, int64_t n) {
  if (t_ == 1) return;
  // Megatron all-reduces these in bf16; weft adds the ranks' bf16 partials in fp32 and rounds
  // once, so tp = 2 differs from one rank by one extra rounding of each partial.
  backend_.widen(b_.sum, x, n);
  backend_.synchronize();  // the communicator may run on another stream, or on the host
  tp_->all_reduce(b_.sum, n);
  backend_.convert(x, b_.sum, n);
}

// One block on this rank: qkv and fc column-parallel (its heads, its 4C/t columns), the two
// projections row-parallel with the partial sums summed over tp; the row-parallel biases are
// added by tp rank 0 alone, so the sum adds each once.
void MixedGpt::layer_forward(int i, const Layer& a, int B, int T) {
  const int C = cfg_.n_embd, Cl = C / t_, NHl = cfg_.n_head / t_, N = B * T;
  const Weights& w = layer_weights(stage_.first_layer + i);
  kernels::Backend& k = backend_;
  k.linear_forward(a.qkv, nullptr, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl);
  k.attention_forward(a.atty, a.lse, a.qkv, B, T, Cl, NHl);
  k.linear_forward(b_.scratch, nullptr, a.atty, w.proj_w, r_ == 0 ? w.proj_b : nullptr, N, Cl, C);
  sum_over_tp(b_.scratch, int64_t{N} * C);
  k.fused_residual_layernorm_forward(a.res_attn, a.ln2, a.ln2_mean, a.ln2_rstd, a.x, b_.scratch,
                                     w.ln2_w, w.ln2_b, N, C);
  k.linear_forward(a.fc_gelu, a.fc_pre, a.ln2, w.fc_w, w.fc_b, N, C, 4 * Cl);
}

float MixedGpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                        float grad_scale, int slot) {
  WEFT_CHECK(B > 0 && B <= B_ && T > 0 && T <= T_, "forward of ", B, "x", T,
             " exceeds the allocated ", B_, "x", T_);
  WEFT_CHECK(slot >= 0 && slot < slots(), "slot ", slot, " outside the ", slots(), " allocated");
  const int C = cfg_.n_embd, Cl = C / t_, V = cfg_.vocab_size, Vl = cfg_.padded_vocab() / t_;
  const int v0 = r_ * Vl, Vv = std::max(0, std::min(Vl, V - v0));  // this rank's vocabulary
  const int N = B * T, L = static_cast<int>(slots_[slot].layers.size());
  const int first = stage_.first_layer;
  Slot& sl = slots_[slot];
  kernels::Backend& k = backend_;
  if (stage_.embedding) {
    WEFT_CHECK(tokens != nullptr, "the first stage's forward needs tokens");
    for (int i = 0; i < N; ++i) {
      WEFT_CHECK(tokens[i] >= 0 && tokens[i] < V, "token ", tokens[i], " at position ", i,
                 " is outside the vocabulary of ", V);
    }
    k.upload(b_.tokens, tokens, int64_t{N} * 4);
    if (t_ == 1) {
      k.embedding_forward(sl.layers[0].x, b_.tokens, w16("wte"), w16("wpe"), B, T, C);
    } else {  // vocabulary-parallel: each rank its rows (rank 0 adds wpe), summed
      k.embedding_forward_shard(sl.layers[0].x, b_.tokens, w16("wte"),
                                r_ == 0 ? w16("wpe") : nullptr, B, T, C, v0, Vl);
      sum_over_tp(sl.layers[0].x, int64_t{N} * C);
    }
  }
  {
    const Weights& w = layer_weights(first);
    const Layer& a = sl.layers[0];
    k.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, w.ln1_w, w.ln1_b, N, C);
  }
  for (int i = 0; i < L; ++i) {
    const Weights& w = layer_weights(first + i);
    const Layer& a = sl.layers[i];
    layer_forward(i, a, B, T);
    k.linear_forward(b_.scratch, nullptr, a.fc_gelu, w.mlp_w, r_ == 0 ? w.mlp_b : nullptr, N,
                     4 * Cl, C);
    sum_over_tp(b_.scratch, int64_t{N} * C);
    if (i + 1 < L) {  // x_{l+1} = res_attn + mlp, normalized by the next block's ln_1
      const Weights& next = layer_weights(first + i + 1);
      const Layer& b = sl.layers[i + 1];
      k.fused_residual_layernorm_forward(b.x, b.ln1, b.ln1_mean, b.ln1_rstd, a.res_attn, b_.scratch,
                                         next.ln1_w, next.ln1_b, N, C);
    } else if (stage_.head) {
      k.fused_residual_layernorm_forward(sl.x_out, sl.lnf, sl.lnf_mean, sl.lnf_rstd, a.res_attn,
                                         b_.scratch, w16("ln_f.weight"), w16("ln_f.bias"), N, C);
    } else {  // the stage's output, for the next stage
      k.residual_forward(sl.x_out, a.res_attn, b_.scratch, int64_t{N} * C);
    }
  }
  sl.tokens_host = tokens;
  sl.B = B;
  sl.T = T;
  sl.backward_due = true;
  if (!stage_.head) return 0.0f;

  WEFT_CHECK(targets != nullptr, "the last stage's forward needs targets");
  int64_t valid = 0;
  for (int i = 0; i < N; ++i) {
    WEFT_CHECK(targets[i] < V, "target ", targets[i], " is outside the vocabulary of ", V);
    valid += targets[i] >= 0;
  }
  k.upload(b_.targets, targets, int64_t{N} * 4);
  // The tied embedding: this rank's vocabulary columns of the logits.
  k.linear_forward(sl.logits, nullptr, sl.lnf, w16("wte"), nullptr, N, C, Vl);
  const float dloss = valid > 0 ? grad_scale / static_cast<float>(valid) : 0.0f;
  if (t_ == 1) {
    k.softmax_cross_entropy(sl.losses, sl.logits, b_.targets, dloss, N, V, Vl);
  } else {  // each row's max, sum of exponentials and target logit, gathered: never the logits
    k.cross_entropy_shard_stats(b_.ce, sl.logits, b_.targets, N, Vl, Vv, v0);
    k.synchronize();
    tp_->all_gather(b_.ce_all, b_.ce, int64_t{N} * 3);
    k.cross_entropy_shard_finish(sl.losses, sl.logits, b_.ce_all, t_, b_.targets, dloss, N, V, Vl,
                                 Vv, v0);
  }
  k.download(losses_host_.data(), sl.losses, int64_t{N} * 4);
  double sum = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] >= 0) sum += losses_host_[i];
  }
  return valid > 0 ? static_cast<float>(sum / static_cast<double>(valid)) : 0.0f;
}

void MixedGpt::backward(int slot) {
  WEFT_CHECK(slot >= 0 && slot < slots(), "slot ", slot, " outside the ", slots(), " allocated");
  Slot& sl = slots_[slot];
  WEFT_CHECK(sl.backward_due, "backward() of slot ", slot, " needs a forward() first");
  sl.backward_due = false;
  const int B = sl.B, T = sl.T, N = B * T, C = cfg_.n_embd, Cl = C / t_, NHl = cfg_.n_head / t_;
  const int Vl = cfg_.padded_vocab() / t_, first = stage_.first_layer;
  const int64_t NC = int64_t{N} * C;
  kernels::Backend& k = backend_;
  // d_res: the residual stream's gradient, accumulated in place from the top down. The input
  // gradients of column-parallel GEMMs (qkv, fc, the LM head) are partial sums over tp: summed
  // before they enter a LayerNorm's backward (Megatron's f).
  Act* d_res = b_.d_res;
  if (stage_.head) {  // the logits hold d(loss)/d(logits) since the forward
    k.linear_backward(b_.d_ln, g32("wte"), nullptr, sl.logits, sl.lnf, w16("wte"), nullptr, N, C,
                      Vl);
    sum_over_tp(b_.d_ln, NC);
    k.zero(d_res, NC * 2);
    k.layernorm_backward(d_res, g32("ln_f.weight"), g32("ln_f.bias"), b_.d_ln, sl.x_out,
                         w16("ln_f.weight"), sl.lnf_mean, sl.lnf_rstd, N, C);
  } else {
    d_res = sl.d_out;  // received from the next stage
  }
  for (int i = static_cast<int>(sl.layers.size()) - 1; i >= 0; --i) {
    const Weights& w = layer_weights(first + i);
    const Layer& a = sl.layers[i];
    if (recompute_ == Recompute::Full) {
      // The layer's tensors again, from its stored input. layernorm_forward of x gives the bits the
      // forward's fused residual + LayerNorm gave (kernels/backend.h).
      k.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, w.ln1_w, w.ln1_b, N, C);
      layer_forward(i, a, B, T);
    }
    // d_res = dL/dx_{l+1}, which is also dL/d(mlp) and the direct part of dL/d(res_attn). The
    // row-parallel biases' gradients are the same on every tp rank (d_res is replicated).
    Act* d_fc = b_.d_wide;  // [N,4C/t]: the gradient of fc's pre-activation (GeLU fused)
    k.linear_backward(d_fc, w.d_mlp_w, w.d_mlp_b, d_res, a.fc_gelu, w.mlp_w, a.fc_pre, N, 4 * Cl,
                      C);
    k.linear_backward(b_.d_ln, w.d_fc_w, w.d_fc_b, d_fc, a.ln2, w.fc_w, nullptr, N, C, 4 * Cl);
    sum_over_tp(b_.d_ln, NC);
    k.layernorm_backward(d_res, w.d_ln2_w, w.d_ln2_b, b_.d_ln, a.res_attn, w.ln2_w, a.ln2_mean,
                         a.ln2_rstd, N, C);
    // d_res = dL/d(res_attn) = dL/d(attn.proj output) and the direct part of dL/dx_l.
    k.linear_backward(b_.d_atty, w.d_proj_w, w.d_proj_b, d_res, a.atty, w.proj_w, nullptr, N, Cl,
                      C);
    Act* d_qkv = b_.d_wide;  // [N,3C/t]
    k.attention_backward(d_qkv, b_.d_atty, a.qkv, a.atty, a.lse, B, T, Cl, NHl);
    k.linear_backward(b_.d_ln, w.d_qkv_w, w.d_qkv_b, d_qkv, a.ln1, w.qkv_w, nullptr, N, C, 3 * Cl);
    sum_over_tp(b_.d_ln, NC);
    k.layernorm_backward(d_res, w.d_ln1_w, w.d_ln1_b, b_.d_ln, a.x, w.ln1_w, a.ln1_mean, a.ln1_rstd,
                         N, C);
  }
  if (stage_.embedding) {
    if (t_ == 1) {
      k.embedding_backward(g32("wte"), g32("wpe"), d_res, sl.tokens_host, B, T, C);
    } else {  // this rank's vocabulary rows; wpe (replicated) from the whole gradient everywhere
      k.embedding_backward_shard(g32("wte"), g32("wpe"), d_res, sl.tokens_host, B, T, C, r_ * Vl,
                                 Vl);
    }
  }
  input_grad_ = d_res;
}

}  // namespace weft::model
