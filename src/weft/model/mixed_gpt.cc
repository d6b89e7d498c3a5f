#include "weft/model/mixed_gpt.h"

#include <string>

#include "weft/core/check.h"
#include "weft/core/status.h"

namespace weft::model {
namespace {

constexpr int64_t kAlign = 256;  // what MixedBackend::allocate aligns to

enum class Kind { Params, Grads, Activations, Workspace };

// Counts what a model of this shape allocates, without allocating.
struct Counter {
  MemoryEstimate bytes;
  template <typename T>
  T* take(int64_t n, Kind kind) {
    const int64_t b = (n * static_cast<int64_t>(sizeof(T)) + kAlign - 1) / kAlign * kAlign;
    switch (kind) {
      case Kind::Params:
        bytes.params += b;
        break;
      case Kind::Grads:
        bytes.grads += b;
        break;
      case Kind::Activations:
        bytes.activations += b;
        break;
      case Kind::Workspace:
        bytes.workspace += b;
        break;
    }
    return nullptr;
  }
};

// Allocates it from the backend.
struct Allocator {
  kernels::MixedBackend& backend;
  template <typename T>
  T* take(int64_t n, Kind) {
    return backend.allocate<T>(n);
  }
};

}  // namespace

// Every buffer of the model, in one list that both bytes() and the constructor walk (say it once:
// the predicted and the allocated memory cannot drift apart).
template <typename Sink>
void MixedGpt::lay_out(Sink& s, const GptConfig& cfg, int64_t param_count, int B, int T,
                       const StageSpec& stage, Recompute recompute, Buffers& b,
                       std::vector<Slot>& slots) {
  const int64_t N = int64_t{B} * T, C = cfg.n_embd, NH = cfg.n_head, Vp = cfg.padded_vocab();
  b.params = s.template take<float>(param_count, Kind::Params);
  b.params16 = s.template take<BF16>(param_count, Kind::Params);
  b.grads = s.template take<float>(param_count, Kind::Grads);
  const Kind a = Kind::Activations, w = Kind::Workspace;
  // A layer's tensors after its input x: per layer and slot, or (full recomputation) one set that
  // every layer of every slot shares, recomputed before each layer's backward.
  auto take_layer = [&](Layer& l, Kind k) {
    l.ln1 = s.template take<BF16>(N * C, k);
    l.ln1_mean = s.template take<float>(N, k);
    l.ln1_rstd = s.template take<float>(N, k);
    l.qkv = s.template take<BF16>(N * 3 * C, k);
    l.atty = s.template take<BF16>(N * C, k);
    l.lse = s.template take<float>(NH * N, k);
    l.res_attn = s.template take<BF16>(N * C, k);
    l.ln2 = s.template take<BF16>(N * C, k);
    l.ln2_mean = s.template take<float>(N, k);
    l.ln2_rstd = s.template take<float>(N, k);
    l.fc_pre = s.template take<BF16>(N * 4 * C, k);
    l.fc_gelu = s.template take<BF16>(N * 4 * C, k);
  };
  const bool full = recompute == Recompute::Full;
  Layer shared{};
  if (full) take_layer(shared, w);
  for (Slot& slot : slots) {
    slot.layers.resize(stage.end_layer(cfg) - stage.first_layer);
    for (Layer& l : slot.layers) {
      if (full) {
        l = shared;
      } else {
        take_layer(l, a);
      }
      l.x = s.template take<BF16>(N * C, a);
    }
    slot.x_out = s.template take<BF16>(N * C, a);
    if (stage.head) {
      slot.lnf = s.template take<BF16>(N * C, a);
      slot.lnf_mean = s.template take<float>(N, a);
      slot.lnf_rstd = s.template take<float>(N, a);
      slot.logits = s.template take<BF16>(N * Vp, a);
      slot.losses = s.template take<float>(N, a);
    } else {
      slot.d_out = s.template take<BF16>(N * C, a);
    }
  }
  b.scratch = s.template take<BF16>(N * C, w);
  b.d_res = s.template take<BF16>(N * C, w);
  b.d_ln = s.template take<BF16>(N * C, w);
  b.d_atty = s.template take<BF16>(N * C, w);
  b.d_wide = s.template take<BF16>(N * 4 * C, w);
  b.tokens = s.template take<int32_t>(N, w);
  b.targets = s.template take<int32_t>(N, w);
}

MemoryEstimate MixedGpt::bytes(const GptConfig& cfg, int B, int T, StageSpec stage, int slots,
                               Recompute recompute) {
  Counter counter;
  Buffers unused;
  std::vector<Slot> slot_list(slots);
  lay_out(counter, cfg, gpt_param_layout(cfg, 1, 0, stage).buffer.total(), B, T, stage, recompute,
          unused, slot_list);
  return counter.bytes;
}

MixedGpt::MixedGpt(kernels::MixedBackend& backend, const GptConfig& cfg, int B, int T,
                   StageSpec stage, int slots, Recompute recompute)
    : backend_(backend), cfg_(cfg), B_(B), T_(T), stage_(stage), recompute_(recompute) {
  Status s = validate_stage(cfg, B, T, stage, slots);
  if (s.ok() && !backend.attention_supports(cfg.n_embd, cfg.n_head)) {
    s.add("the " + backend.name() + " attention kernel does not take heads of size " +
          std::to_string(cfg.n_embd / cfg.n_head) + " (n_embd " + std::to_string(cfg.n_embd) +
          " / n_head " + std::to_string(cfg.n_head) + "); it takes 64 and 128");
  }
  s.throw_if_error("invalid model config '" + cfg.name + "' for " + backend.name());
  layout_ = gpt_param_layout(cfg_, 1, 0, stage_);
  slots_.resize(slots);
  Allocator alloc{backend_};
  lay_out(alloc, cfg_, layout_.buffer.total(), B, T, stage_, recompute_, b_, slots_);
  losses_host_.resize(static_cast<size_t>(B) * T);
  // Padding between slices is never written by a kernel: zero it once, so sums over the whole
  // buffers (the gradient norm) and the AdamW pass see zeros there.
  const int64_t n = layout_.buffer.total();
  backend_.zero(b_.params, n * 4);
  backend_.zero(b_.params16, n * 2);
  backend_.zero(b_.grads, n * 4);
}

MixedGpt::Weights MixedGpt::layer_weights(int l) const {
  auto w = [&](const char* n) { return w16(layer_param(l, n)); };
  auto g = [&](const char* n) { return g32(layer_param(l, n)); };
  return Weights{
      w("ln_1.weight"),      w("ln_1.bias"),      w("attn.qkv.weight"), w("attn.qkv.bias"),
      w("attn.proj.weight"), w("attn.proj.bias"), w("ln_2.weight"),     w("ln_2.bias"),
      w("mlp.fc.weight"),    w("mlp.fc.bias"),    w("mlp.proj.weight"), w("mlp.proj.bias"),
      g("ln_1.weight"),      g("ln_1.bias"),      g("attn.qkv.weight"), g("attn.qkv.bias"),
      g("attn.proj.weight"), g("attn.proj.bias"), g("ln_2.weight"),     g("ln_2.bias"),
      g("mlp.fc.weight"),    g("mlp.fc.bias"),    g("mlp.proj.weight"), g("mlp.proj.bias")};
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
  backend_.convert(b_.params16, b_.params, n);
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

double MixedGpt::grad_sum_squares() const {
  const int64_t n = layout_.buffer.total();
  if (!stage_.head || stage_.embedding) return backend_.sum_squares(b_.grads, n);
  // The last stage's wte is a copy of the first stage's (the same summed gradient): skip it.
  const SliceSpec& wte = layout_.buffer.at("wte");
  return backend_.sum_squares(b_.grads, wte.offset) +
         backend_.sum_squares(b_.grads + wte.offset + wte.numel, n - wte.offset - wte.numel);
}

void MixedGpt::layer_forward(int i, const Layer& a, int B, int T) {
  const int C = cfg_.n_embd, NH = cfg_.n_head, N = B * T;
  const Weights w = layer_weights(stage_.first_layer + i);
  kernels::MixedBackend& k = backend_;
  k.linear_forward(a.qkv, nullptr, a.ln1, w.qkv_w, w.qkv_b, N, C, 3 * C);
  k.attention_forward(a.atty, a.lse, a.qkv, B, T, C, NH);
  k.linear_forward(b_.scratch, nullptr, a.atty, w.proj_w, w.proj_b, N, C, C);
  k.fused_residual_layernorm_forward(a.res_attn, a.ln2, a.ln2_mean, a.ln2_rstd, a.x, b_.scratch,
                                     w.ln2_w, w.ln2_b, N, C);
  k.linear_forward(a.fc_gelu, a.fc_pre, a.ln2, w.fc_w, w.fc_b, N, C, 4 * C);
}

float MixedGpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                        float grad_scale, int slot) {
  WEFT_CHECK(B > 0 && B <= B_ && T > 0 && T <= T_, "forward of ", B, "x", T,
             " exceeds the allocated ", B_, "x", T_);
  WEFT_CHECK(slot >= 0 && slot < slots(), "slot ", slot, " outside the ", slots(), " allocated");
  const int C = cfg_.n_embd, V = cfg_.vocab_size, Vp = cfg_.padded_vocab();
  const int N = B * T, L = static_cast<int>(slots_[slot].layers.size());
  const int first = stage_.first_layer;
  Slot& sl = slots_[slot];
  kernels::MixedBackend& k = backend_;
  if (stage_.embedding) {
    WEFT_CHECK(tokens != nullptr, "the first stage's forward needs tokens");
    for (int i = 0; i < N; ++i) {
      WEFT_CHECK(tokens[i] >= 0 && tokens[i] < V, "token ", tokens[i], " at position ", i,
                 " is outside the vocabulary of ", V);
    }
    k.upload(b_.tokens, tokens, int64_t{N} * 4);
    k.embedding_forward(sl.layers[0].x, b_.tokens, w16("wte"), w16("wpe"), B, T, C);
  }
  {
    const Weights w = layer_weights(first);
    const Layer& a = sl.layers[0];
    k.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, w.ln1_w, w.ln1_b, N, C);
  }
  for (int i = 0; i < L; ++i) {
    const Weights w = layer_weights(first + i);
    const Layer& a = sl.layers[i];
    layer_forward(i, a, B, T);
    k.linear_forward(b_.scratch, nullptr, a.fc_gelu, w.mlp_w, w.mlp_b, N, 4 * C, C);
    if (i + 1 < L) {  // x_{l+1} = res_attn + mlp, normalized by the next block's ln_1
      const Weights next = layer_weights(first + i + 1);
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
  k.linear_forward(sl.logits, nullptr, sl.lnf, w16("wte"), nullptr, N, C, Vp);  // tied embedding
  const float dloss = valid > 0 ? grad_scale / static_cast<float>(valid) : 0.0f;
  k.softmax_cross_entropy(sl.losses, sl.logits, b_.targets, dloss, N, V, Vp);
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
  const int B = sl.B, T = sl.T, N = B * T, C = cfg_.n_embd, NH = cfg_.n_head;
  const int Vp = cfg_.padded_vocab(), first = stage_.first_layer;
  kernels::MixedBackend& k = backend_;
  // d_res: the residual stream's gradient, accumulated in place from the top down.
  BF16* d_res = b_.d_res;
  if (stage_.head) {  // the logits hold d(loss)/d(logits) since the forward
    k.linear_backward(b_.d_ln, g32("wte"), nullptr, sl.logits, sl.lnf, w16("wte"), nullptr, N, C,
                      Vp);
    k.zero(d_res, int64_t{N} * C * 2);
    k.layernorm_backward(d_res, g32("ln_f.weight"), g32("ln_f.bias"), b_.d_ln, sl.x_out,
                         w16("ln_f.weight"), sl.lnf_mean, sl.lnf_rstd, N, C);
  } else {
    d_res = sl.d_out;  // received from the next stage
  }
  for (int i = static_cast<int>(sl.layers.size()) - 1; i >= 0; --i) {
    const Weights w = layer_weights(first + i);
    const Layer& a = sl.layers[i];
    if (recompute_ == Recompute::Full) {
      // The layer's tensors again, from its stored input. layernorm_forward of x gives the bits the
      // forward's fused residual + LayerNorm gave (kernels/mixed.h).
      k.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.x, w.ln1_w, w.ln1_b, N, C);
      layer_forward(i, a, B, T);
    }
    // d_res = dL/dx_{l+1}, which is also dL/d(mlp) and the direct part of dL/d(res_attn).
    BF16* d_fc = b_.d_wide;  // [N,4C]: the gradient of fc's pre-activation (GeLU fused)
    k.linear_backward(d_fc, w.d_mlp_w, w.d_mlp_b, d_res, a.fc_gelu, w.mlp_w, a.fc_pre, N, 4 * C, C);
    k.linear_backward(b_.d_ln, w.d_fc_w, w.d_fc_b, d_fc, a.ln2, w.fc_w, nullptr, N, C, 4 * C);
    k.layernorm_backward(d_res, w.d_ln2_w, w.d_ln2_b, b_.d_ln, a.res_attn, w.ln2_w, a.ln2_mean,
                         a.ln2_rstd, N, C);
    // d_res = dL/d(res_attn) = dL/d(attn.proj output) and the direct part of dL/dx_l.
    k.linear_backward(b_.d_atty, w.d_proj_w, w.d_proj_b, d_res, a.atty, w.proj_w, nullptr, N, C, C);
    BF16* d_qkv = b_.d_wide;  // [N,3C]
    k.attention_backward(d_qkv, b_.d_atty, a.qkv, a.atty, a.lse, B, T, C, NH);
    k.linear_backward(b_.d_ln, w.d_qkv_w, w.d_qkv_b, d_qkv, a.ln1, w.qkv_w, nullptr, N, C, 3 * C);
    k.layernorm_backward(d_res, w.d_ln1_w, w.d_ln1_b, b_.d_ln, a.x, w.ln1_w, a.ln1_mean, a.ln1_rstd,
                         N, C);
  }
  if (stage_.embedding) {
    k.embedding_backward(g32("wte"), g32("wpe"), d_res, sl.tokens_host, B, T, C);
  }
  input_grad_ = d_res;
}

}  // namespace weft::model
