#include "weft/model/gpt.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/check.h"
#include "weft/kernels/vocab_parallel_ce.h"

namespace weft::model {

using kernels::Act;

// Pointers to one layer's activations: into its own slices when kept, else into the workspace.
struct Gpt::LayerActs {
  Act *ln_1, *qkv, *atty, *res_attn, *ln_2, *fc, *fc_act, *out;
  float *ln_1_mean, *ln_1_rstd, *att, *ln_2_mean, *ln_2_rstd;  // the means null under RMSNorm
};

Act* Gpt::Blocks::act(const std::string& name) const {
  return kernels::act_offset(act_base, layout.act.at(name).offset, act_size);
}

Gpt::Blocks Gpt::allocate(ActivationLayout layout) {
  Blocks b;
  b.act_size = be_.act_bytes();
  const int64_t act = layout.act.total() * b.act_size, f32 = layout.f32.total() * 4;
  b.act_base = static_cast<Act*>(be_.allocate(act));
  b.f32_base = be_.allocate<float>(layout.f32.total());
  // Zeroed once: nothing reads a value it did not write, but the pages are then resident, as the
  // memory model counts them.
  be_.zero(b.act_base, act);
  be_.zero(b.f32_base, f32);
  b.layout = std::move(layout);
  return b;
}

Gpt::Gpt(const GptConfig& cfg, int B, int T, Recompute recompute, parallel::TensorParallel tp,
         StageSpec stage, int slots, optim::ParamStorage storage, kernels::Backend* backend,
         const Gpt* share_slots)
    : cfg_(cfg),
      own_backend_(backend == nullptr ? kernels::make_host_backend(Precision::FP32) : nullptr),
      be_(backend != nullptr ? *backend : *own_backend_),
      precision_(be_.precision()),
      B_(B),
      T_(T),
      recompute_(recompute),
      tp_(tp),
      stage_(stage) {
  Status s = validate_stage(cfg, B, T, stage, slots);
  if (s.ok()) s.merge(validate_tensor_parallel(cfg, tp.size(), tp.sequence_parallel, B, T));
  if (s.ok() && !be_.attention_supports(cfg.n_embd / tp.size(), cfg.n_head / tp.size())) {
    s.add("the " + be_.name() + " attention kernel does not take heads of size " +
          std::to_string(cfg.n_embd / cfg.n_head) + " (n_embd " + std::to_string(cfg.n_embd) +
          " / n_head " + std::to_string(cfg.n_head) + ")");
  }
  s.throw_if_error("invalid model config '" + cfg.name + "' for " + be_.name());
  sp_ = tp.sequence_parallel && tp.size() > 1;
  norm_ = kernels::Norm{cfg.rms_norm(), cfg.norm_eps};
  const TpShape shape{tp.size(), sp_};
  const int NHl = cfg.n_head / tp.size();
  WEFT_CHECK(
      be_.attention_saved_floats(B, T, NHl) == numel(attention_state_shape(B, T, NHl, precision_)),
      "the ", be_.name(), " attention keeps what the layout does not expect");
  layout_ = gpt_param_layout(cfg_, tp.size(), tp.rank(), stage, storage.unit_align);
  const int64_t n = layout_.buffer.total();
  auto take_f32 = [&] {
    float* p = be_.allocate<float>(n);
    be_.zero(p, n * 4);  // the padding between slices stays 0: whole-buffer sums see 0 there
    return p;
  };
  const bool bf16 = precision_ != Precision::FP32;
  if (storage.model_params && (storage.master_params || !bf16)) {
    params_ = FlatBuffer::view_of(layout_.buffer, take_f32());
  }
  if (storage.model_grads) grads_ = FlatBuffer::view_of(layout_.buffer, take_f32());
  if (bf16 && storage.model_params) {
    read_copy_ = be_.allocate<BF16>(n);
    be_.zero(read_copy_, n * 2);
  }
  for (const optim::ParamUnit& u : layout_.units) {
    if (!storage.model_params) {
      unit_params_.push_back(nullptr);
    } else if (read_copy_ != nullptr) {
      unit_params_.push_back(reinterpret_cast<const Act*>(read_copy_ + u.begin));
    } else {
      unit_params_.push_back(reinterpret_cast<const Act*>(params_.data() + u.begin));
    }
  }
  wte_unit_ = layout_.unit_index("wte");
  wpe_unit_ = layout_.unit_index("wpe");
  ln_f_unit_ = layout_.unit_index("ln_f");
  head_unit_ = layout_.unit_index(head_name());
  first_layer_unit_ = layout_.unit_index("h." + std::to_string(stage.first_layer));
  WEFT_CHECK(
      share_slots == nullptr || (&share_slots->be_ == &be_ && share_slots->slots() == slots &&
                                 share_slots->B_ == B && share_slots->T_ == T),
      "slots shared with another backend's model, or of another count or batch");
  for (int i = 0; i < slots; ++i) {
    ActivationLayout layout =
        gpt_activation_layout(cfg_, B, T, recompute, shape, stage, precision_);
    if (share_slots == nullptr) {
      acts_.push_back(allocate(std::move(layout)));
      continue;
    }
    const Blocks& theirs = share_slots->acts_[i];
    WEFT_CHECK(layout.act.total() == theirs.layout.act.total() &&
                   layout.f32.total() == theirs.layout.f32.total(),
               "slot layouts of different sizes cannot share their slots");
    acts_.push_back(Blocks{std::move(layout), theirs.act_base, theirs.f32_base, theirs.act_size});
  }
  pending_.resize(slots);
  if (storage.deferred_weight_grads) {
    const int64_t n = deferred_grad_elements(cfg_, B, T, shape, stage);
    for (Pending& p : pending_)
      p.deferred_block = static_cast<Act*>(be_.allocate(n * be_.act_bytes()));
  }
  work_ = allocate(gpt_workspace_layout(cfg_, B, T, recompute, shape, stage, precision_));
}

Gpt::~Gpt() = default;

void Gpt::init(uint64_t seed) {
  WEFT_CHECK(params_.size() > 0, "this model's parameters are held by its optimizer: init there");
  if (be_.host_memory()) {  // in place: no second copy of the parameters, even for a moment
    init_params(params_, layout_, seed);
    refresh_read_copy(0, layout_.buffer.total());
    return;
  }
  FlatBuffer host(layout_.buffer);
  init_params(host, layout_, seed);
  set_params({host.data(), static_cast<size_t>(host.size())});
}

void Gpt::set_params(std::span<const float> host) {
  const int64_t n = layout_.buffer.total();
  WEFT_CHECK(params_.size() == n && static_cast<int64_t>(host.size()) == n,
             "set_params: ", host.size(), " values for a layout of ", n);
  be_.upload(params_.data(), host.data(), n * 4);
  refresh_read_copy(0, n);
}

void Gpt::get_params(std::span<float> host) const { download(params_, host, "get_params"); }
void Gpt::get_grads(std::span<float> host) const { download(grads_, host, "get_grads"); }

void Gpt::download(const FlatBuffer& from, std::span<float> host, const char* what) const {
  const int64_t n = layout_.buffer.total();
  WEFT_CHECK(from.size() == n && static_cast<int64_t>(host.size()) == n, what, ": room for ",
             host.size(), " values, the layout has ", n);
  be_.download(host.data(), from.data(), n * 4);
}

void Gpt::refresh_read_copy(int64_t at, int64_t n) {
  if (read_copy_ == nullptr || params_.size() == 0) return;  // the optimizer's master shard rounds
  WEFT_CHECK(at >= 0 && n >= 0 && at + n <= layout_.buffer.total(), "refresh_read_copy [", at, ", ",
             at + n, ")");
  be_.convert(reinterpret_cast<Act*>(read_copy_ + at), params_.data() + at, n);
}

void Gpt::zero_grad() {
  if (grads_.size() > 0) be_.zero(grads_.data(), grads_.size() * 4);
}

std::pair<int, int64_t> Gpt::locate(const std::string& name) const {
  const int64_t offset = layout_.buffer.at(name).offset;
  const auto& units = layout_.units;
  const auto it =
      std::upper_bound(units.begin(), units.end(), offset,
                       [](int64_t o, const optim::ParamUnit& u) { return o < u.begin; });
  const int u = static_cast<int>(it - units.begin()) - 1;
  return {u, offset - units[u].begin};
}

const Act* Gpt::param_or_null(const std::string& name) const {
  return layout_.buffer.contains(name) ? param(name) : nullptr;
}

float* Gpt::grad_or_null(const std::string& name) {
  return layout_.buffer.contains(name) ? grad(name) : nullptr;
}

float* Gpt::ln_f_mean(const Blocks& acts) const {
  return cfg_.rms_norm() ? nullptr : acts.f32("ln_f.mean");
}

const Act* Gpt::param(const std::string& name) const {
  const auto [u, at] = locate(name);
  WEFT_CHECK(unit_params_[u] != nullptr, "parameter ", name, " read outside a gather of its unit");
  return kernels::act_offset(unit_params_[u], at, be_.act_bytes());
}

float* Gpt::grad(const std::string& name) {
  const auto [u, at] = locate(name);
  if (hooks_ != nullptr) return hooks_->grads(u) + at;
  WEFT_CHECK(grads_.size() > 0, "this model's gradients are held by its optimizer");
  return grads_.data() + layout_.units[u].begin + at;
}

void Gpt::gather(int unit) {
  if (hooks_ == nullptr || unit < 0) return;
  unit_params_[unit] = static_cast<const Act*>(hooks_->gather(unit));
}

void Gpt::release(int unit) {
  if (hooks_ == nullptr || unit < 0) return;
  hooks_->release(unit);
  if (params_.size() == 0 && read_copy_ == nullptr) unit_params_[unit] = nullptr;
}

Gpt::LayerActs Gpt::layer_acts(const Blocks& acts, int l) const {
  const std::string own = "h." + std::to_string(l) + ".";
  auto block = [&](const char* name) -> const Blocks& {
    return kept_per_layer(name, recompute_, precision_) ? acts : work_;
  };
  auto slice = [&](const char* name) {
    return (kept_per_layer(name, recompute_, precision_) ? own : std::string("layer.")) + name;
  };
  // The last layer's output of a stage without the head is the caller's (forward's `output`).
  const bool own_out = stage_.head || l < stage_.end_layer(cfg_) - 1;
  auto a = [&](const char* name) {
    return std::string_view(name) == "out" && !own_out ? nullptr : block(name).act(slice(name));
  };
  auto f = [&](const char* name) {
    return has_layer_activation(cfg_, name) ? block(name).f32(slice(name)) : nullptr;
  };
  return LayerActs{a("ln_1"), a("qkv"),       a("atty"),     a("res_attn"),  a("ln_2"),
                   a("fc"),   a("fc_act"),    a("out"),      f("ln_1.mean"), f("ln_1.rstd"),
                   f("att"),  f("ln_2.mean"), f("ln_2.rstd")};
}

// ---- the tp group's collectives on activations ------------------------------------------------
// In the activation type: fp32 as floats, bf16 as bf16, summed in bf16 as Megatron-LM and NCCL do
// (each add in fp32, rounded once: comm::reduce_into), so no widened fp32 copy exists. A
// communicator on the backend's memory starts each op after the backend work queued before it;
// order() queues the kernels that read the result after it, with no host wait on a device
// (comm::Work; docs/cuda.md, "Streams and events").

comm::Payload Gpt::act_payload(int64_t n) const { return comm::payload_of(n, be_.act_bytes()); }

void Gpt::tp_all_gather(Act* full, const Act* local, int64_t n_local) {
  const comm::Payload p = act_payload(n_local);
  tp_.comm->all_gather_async(full, local, p.count, p.type).order();
}

void Gpt::tp_all_reduce(Act* x, int64_t n) {
  const comm::Payload p = act_payload(n);
  tp_.comm->all_reduce_async(x, p.count, p.type, comm::ReduceOp::Sum).order();
}

void Gpt::tp_reduce_scatter(Act* local, const Act* full, int64_t n_local) {
  const comm::Payload p = act_payload(n_local);
  tp_.comm->reduce_scatter_async(local, full, p.count, p.type).order();
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
void Gpt::layernorm_gathered(Act* full, float* mean, float* rstd, const Act* in, const Act* w,
                             const Act* b, int N) {
  const int C = cfg_.n_embd;
  if (!sp_) {
    be_.layernorm_forward(full, mean, rstd, in, w, b, N, C, norm_);
    return;
  }
  const int Ns = N / tp_.size();
  Act* local = work_.act("sp.ln");
  be_.layernorm_forward(local, mean, rstd, in, w, b, Ns, C, norm_);
  tp_all_gather(full, local, int64_t{Ns} * C);
}

// g forward: partial[N,C] summed over the tp group into out (N rows, or this rank's Ns under SP).
// Without SP, `partial` and `out` may be the same buffer (all-reduce in place).
void Gpt::reduce_partial(Act* out, Act* partial, int N) {
  const int64_t C = cfg_.n_embd;
  if (tp_.size() == 1) return;
  if (sp_) {
    tp_reduce_scatter(out, partial, N / tp_.size() * C);
  } else {
    WEFT_CHECK(out == partial, "without sequence parallelism g reduces in place");
    tp_all_reduce(out, N * C);
  }
}

// g backward: the gradient of a row-parallel output, d_res (Ns rows), as the full [N,C] every rank
// needs for its GEMM's backward (all-gather under SP; identity otherwise).
const Act* Gpt::gather_grad(const Act* d_res, int N) {
  if (!sp_) return d_res;
  Act* full = work_.act("d.gathered");
  tp_all_gather(full, d_res, int64_t{N} / tp_.size() * cfg_.n_embd);
  return full;
}

// f backward: the column-parallel GEMM's input gradient d_partial[N,C] (this rank's heads or
// columns only) summed over the group: in place, or reduce-scattered to Ns rows under SP.
const Act* Gpt::reduce_grad(Act* d_partial, int N) {
  if (tp_.size() == 1) return d_partial;
  if (!sp_) {
    tp_all_reduce(d_partial, int64_t{N} * cfg_.n_embd);
    return d_partial;
  }
  Act* local = work_.act("d.ln_local");
  tp_reduce_scatter(local, d_partial, int64_t{N} / tp_.size() * cfg_.n_embd);
  return local;
}

// One pre-norm transformer block (GPT-2; Llama with its choices, gpt_config.h):
//   res_attn = in + attn.proj(attention(rope(attn.qkv(ln_1(in)))))
//   out      = res_attn + mlp.proj(act(mlp.fc(ln_2(res_attn))))
// with act = gelu, or SwiGLU's silu(gate) * up over mlp.fc's two halves, and rope only with
// rotary positions (applied to q and k in place: qkv keeps the rotated values, which are what
// attention's backward reads). On a tp rank: qkv [N,QKV/t] and fc [N,FC/t] are its heads and
// columns; each proj GEMM gives a partial sum [N,C] that g reduces. The row-parallel biases are
// added by tp rank 0 only, so the reduction adds each once.
void Gpt::layer_forward(int l, const Act* in, const LayerActs& a, int B, int T) {
  const int t = tp_.size(), C = cfg_.n_embd, Cl = C / t, NHl = cfg_.n_head / t, N = B * T;
  const int NKVl = cfg_.kv_heads() / t, Fl = cfg_.ffn() / t;
  const int64_t Ns = sp_ ? N / t : N;
  auto w = [&](const char* n) { return param(layer_param(l, n)); };
  auto bias = [&](const char* n) { return param_or_null(layer_param(l, n)); };
  auto row_bias = [&](const char* n) { return tp_.rank() == 0 ? bias(n) : nullptr; };
  Act* partial = sp_ ? work_.act("sp.partial") : nullptr;

  layernorm_gathered(a.ln_1, a.ln_1_mean, a.ln_1_rstd, in, w("ln_1.weight"), bias("ln_1.bias"), N);
  be_.linear_forward(a.qkv, nullptr, a.ln_1, w("attn.qkv.weight"), bias("attn.qkv.bias"), N, C,
                     static_cast<int>(cfg_.qkv_width() / t));
  if (cfg_.rope()) be_.rope(a.qkv, B, T, NHl, NKVl, cfg_.head_size(), cfg_.rope_theta, false);
  be_.attention_forward(a.atty, a.att, a.qkv, B, T, Cl, NHl, NKVl);
  Act* proj = sp_ ? partial : a.res_attn;  // attn.proj output, then the residual sum in place
  be_.linear_forward(proj, nullptr, a.atty, w("attn.proj.weight"), row_bias("attn.proj.bias"), N,
                     Cl, C);
  reduce_partial(a.res_attn, proj, N);
  be_.residual_forward(a.res_attn, a.res_attn, in, Ns * C);

  layernorm_gathered(a.ln_2, a.ln_2_mean, a.ln_2_rstd, a.res_attn, w("ln_2.weight"),
                     bias("ln_2.bias"), N);
  if (cfg_.mlp == MlpKind::SwiGLU) {
    // fc = ln_2 Wfc^T + b: [N, 2F/t], this rank's gate columns, then its up columns.
    be_.linear_forward(a.fc, nullptr, a.ln_2, w("mlp.fc.weight"), bias("mlp.fc.bias"), N, C,
                       2 * Fl);
    be_.swiglu_forward(a.fc_act, a.fc, N, Fl);
  } else {
    // fc_act = gelu(fc), fc = ln_2 Wfc^T + b
    be_.linear_forward(a.fc_act, a.fc, a.ln_2, w("mlp.fc.weight"), bias("mlp.fc.bias"), N, C, Fl);
  }
  proj = sp_ ? partial : a.out;
  be_.linear_forward(proj, nullptr, a.fc_act, w("mlp.proj.weight"), row_bias("mlp.proj.bias"), N,
                     Fl, C);
  reduce_partial(a.out, proj, N);
  be_.residual_forward(a.out, a.out, a.res_attn, Ns * C);
}

const float* Gpt::logits(int slot) const {
  WEFT_CHECK(precision_ == Precision::FP32, "logits() reads fp32 host activations");
  return reinterpret_cast<const float*>(acts_.at(slot).act("logits"));
}

float Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T, int slot,
                   float loss_scale, const ForwardOut& out) {
  WEFT_CHECK(B > 0 && B <= B_ && T > 0 && T <= T_, "forward of ", B, "x", T,
             " exceeds the allocated ", B_, "x", T_);
  WEFT_CHECK(slot >= 0 && slot < slots(), "slot ", slot, " outside the ", slots(), " allocated");
  WEFT_CHECK(stage_.head || out.output != nullptr,
             "a stage without the head needs a buffer for its output");
  const int t = tp_.size(), C = cfg_.n_embd, V = cfg_.vocab_size, N = B * T;
  const int Vl = static_cast<int>(cfg_.padded_vocab() / t), v0 = tp_.rank() * Vl;
  WEFT_CHECK(!sp_ || N % t == 0, "sequence parallelism needs B*T=", N, " divisible by tp=", t);
  const Blocks& acts = acts_[slot];
  Pending& p = pending_[slot];
  WEFT_CHECK(!p.weights_due, "slot ", slot, " still owes its deferred weight gradients");
  p.tokens = tokens;
  p.targets = stage_.head ? targets : nullptr;
  p.B = B;
  p.T = T;
  p.valid_targets = 0;
  p.backward_due = false;

  // The batch in the backend's memory (the workspace's copies: only this forward reads them).
  auto* dev_tokens = reinterpret_cast<int32_t*>(work_.f32("tokens"));
  auto* dev_targets = reinterpret_cast<int32_t*>(work_.f32("targets"));
  if (stage_.embedding) {
    WEFT_CHECK(tokens != nullptr, "the first stage's forward needs tokens");
    for (int i = 0; i < N; ++i) {
      WEFT_CHECK(tokens[i] >= 0 && tokens[i] < V, "token ", tokens[i], " at position ", i,
                 " is outside the vocabulary of ", V);
    }
    be_.upload_async(dev_tokens, tokens, int64_t{N} * 4);
  }
  if (stage_.head && targets != nullptr) {
    for (int i = 0; i < N; ++i) {
      WEFT_CHECK(targets[i] < V, "target ", targets[i], " is outside the vocabulary of ", V);
      p.valid_targets += targets[i] >= 0;
    }
    be_.upload_async(dev_targets, targets, int64_t{N} * 4);
  }

  // Embedding. Vocabulary-parallel: each rank looks up its rows (tp rank 0 adds wpe), g sums.
  Act* x = acts.act("embed");
  if (stage_.embedding) {
    gather(wte_unit_);
    gather(wpe_unit_);
    const Act* wpe = param_or_null("wpe");  // none with rotary positions
    if (t == 1) {
      be_.embedding_forward(x, dev_tokens, param("wte"), wpe, B, T, C);
    } else {
      Act* partial = sp_ ? work_.act("sp.partial") : x;
      be_.embedding_forward_shard(partial, dev_tokens, param("wte"),
                                  tp_.rank() == 0 ? wpe : nullptr, B, T, C, v0, Vl);
      reduce_partial(x, partial, N);
    }
    release(wpe_unit_);
    release(wte_unit_);
  }
  const Act* in = x;
  for (int l = stage_.first_layer; l < stage_.end_layer(cfg_); ++l) {
    LayerActs a = layer_acts(acts, l);
    if (a.out == nullptr) a.out = out.output;  // the last layer of a stage without the head
    gather(layer_unit(l));
    layer_forward(l, in, a, B, T);
    release(layer_unit(l));
    in = a.out;
  }
  p.backward_due = true;
  if (!stage_.head) return 0.0f;

  gather(ln_f_unit_);
  gather(head_unit_);
  Act* lnf = acts.act("ln_f");
  layernorm_gathered(lnf, ln_f_mean(acts), acts.f32("ln_f.rstd"), in, param("ln_f.weight"),
                     param_or_null("ln_f.bias"), N);
  Act* logits = acts.act("logits");  // [N, Vl]: this rank's vocabulary columns
  be_.linear_forward(logits, nullptr, lnf, param(head_name()), nullptr, N, C, Vl);
  release(head_unit_);
  release(ln_f_unit_);
  if (targets == nullptr) return 0.0f;

  // The losses, and the logits overwritten with the gradient of loss_scale * the mean loss.
  const float dloss = p.valid_targets > 0 ? loss_scale / static_cast<float>(p.valid_targets) : 0.0f;
  float* losses = acts.f32("losses");
  if (t == 1) {
    be_.softmax_cross_entropy(losses, logits, dev_targets, dloss, N, V, Vl);
  } else {
    // Vocabulary-parallel (kernels/vocab_parallel_ce.h): three statistics per row gathered over
    // tp, never the logits.
    const int Vv = static_cast<int>(kernels::vocab_ce::real_columns(V, v0, Vl));
    float* stats = acts.f32("ce.stats");
    float* all = acts.f32("ce.all");
    be_.cross_entropy_shard_stats(stats, logits, dev_targets, N, Vl, Vv, v0);
    tp_.comm
        ->all_gather_async(all, stats, int64_t{kernels::vocab_ce::kStats} * N, comm::DataType::F32)
        .order();
    be_.cross_entropy_shard_finish(losses, logits, all, t, dev_targets, dloss, N, V, Vl, Vv, v0);
  }
  if (out.loss_sum != nullptr) {
    if (p.valid_targets > 0) be_.add_mean(out.loss_sum, losses, N, p.valid_targets);
    return 0.0f;
  }
  // Read in place from host memory; a device's come back in one copy.
  if (be_.host_memory()) return mean_loss(losses, targets, N);
  std::vector<float> copy(static_cast<size_t>(N));
  be_.download(copy.data(), losses, int64_t{N} * 4);
  return mean_loss(copy.data(), targets, N);
}

float Gpt::mean_loss(const float* losses, const int32_t* targets, int N) {
  double sum = 0.0;
  int valid = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    sum += losses[i];
    ++valid;
  }
  return valid > 0 ? static_cast<float>(sum / valid) : 0.0f;
}

const Act* Gpt::keep(Pending& p, const Act* src, int64_t n) {
  const int64_t cap = deferred_grad_elements(cfg_, B_, T_, {tp_.size(), sp_}, stage_);
  if (p.deferred_block == nullptr) {
    p.deferred_block = static_cast<Act*>(be_.allocate(cap * be_.act_bytes()));
  }
  WEFT_CHECK(p.deferred_used + n <= cap, "deferred gradients overflow their block");
  Act* dst = kernels::act_offset(p.deferred_block, p.deferred_used, be_.act_bytes());
  be_.copy(dst, src, n * be_.act_bytes());
  p.deferred_used += n;
  return dst;
}

void Gpt::backward(int slot, bool defer_weight_grads) {
  WEFT_CHECK(slot >= 0 && slot < slots(), "slot ", slot, " outside the ", slots(), " allocated");
  Pending& p = pending_[slot];
  WEFT_CHECK(p.backward_due && (!stage_.head || p.targets != nullptr),
             "backward() needs a forward() with targets on slot ", slot);
  WEFT_CHECK(!defer_weight_grads || recompute_ != Recompute::Full,
             "deferred weight gradients need each layer's inputs kept (recompute none or "
             "selective, not full)");
  const Blocks& acts = acts_[slot];
  const int B = p.B, T = p.T, N = B * T, t = tp_.size();
  const int C = cfg_.n_embd, Cl = C / t, NHl = cfg_.n_head / t, NKVl = cfg_.kv_heads() / t;
  const int Fl = cfg_.ffn() / t, FCl = static_cast<int>(cfg_.fc_width() / t);
  const int QKVl = static_cast<int>(cfg_.qkv_width() / t);
  const int Vl = static_cast<int>(cfg_.padded_vocab() / t);
  const int Ns = sp_ ? N / t : N;
  const int64_t a_bytes = be_.act_bytes();
  const int first = stage_.first_layer, end = stage_.end_layer(cfg_);
  Act* d_res = work_.act("d.residual");  // [Ns, C]
  Act* d_ln = work_.act("d.ln");         // [N, C]
  Act* d_atty = work_.act("d.atty");
  Act* d_qkv = work_.act("d.qkv");
  Act* d_fc = work_.act("d.fc");
  auto w = [&](int l, const char* n) { return param(layer_param(l, n)); };
  auto layer_input = [&](int l) -> const Act* {
    return l == first ? acts.act("embed") : layer_acts(acts, l - 1).out;
  };
  // A linear layer's backward (weight `name`.weight, bias `name`.bias unless `bias` is false): the
  // input gradient now (times gelu'(gelu_pre) when the layer's input was a GeLU's output); the
  // weight and bias gradients now, or (deferred) by backward_weights() from a copy of dout unless
  // the slot keeps dout itself.
  auto linear_backward = [&](Act* dinp, const std::string& name, bool layer, const Act* dout,
                             const Act* inp, const Act* gelu_pre, int n, int ic, int oc,
                             bool dout_kept_by_slot) {
    // A layer's linear has name.weight and (with biases) name.bias; the LM head is one tensor.
    const bool bias = layer && cfg_.bias;
    const std::string wname = layer ? name + ".weight" : name, bname = bias ? name + ".bias" : "";
    const Act* weight = param(wname);
    if (!defer_weight_grads) {
      be_.linear_backward(dinp, grad(wname), bias ? grad(bname) : nullptr, dout, inp, weight,
                          gelu_pre, n, ic, oc);
      return;
    }
    // The copy first: dinp may be dout's buffer.
    const Act* kept = dout_kept_by_slot ? dout : keep(p, dout, int64_t{n} * oc);
    be_.linear_backward(dinp, nullptr, nullptr, dout, inp, weight, gelu_pre, n, ic, oc);
    p.deferred.push_back(Deferred{wname, bname, inp, kept, n, ic, oc});
  };
  p.deferred.clear();
  p.deferred_used = 0;

  if (stage_.head) {
    // Head: the forward left dlogits in place of the logits; the LM head's GEMM (the tied
    // embedding, or lm_head) and ln_f.
    gather(ln_f_unit_);
    gather(head_unit_);
    linear_backward(d_ln, head_name(), false, acts.act("logits"), acts.act("ln_f"), nullptr, N, C,
                    Vl, /*dout_kept_by_slot=*/true);
    be_.zero(d_res, int64_t{Ns} * C * a_bytes);
    be_.layernorm_backward(d_res, grad("ln_f.weight"), grad_or_null("ln_f.bias"),
                           reduce_grad(d_ln, N), layer_acts(acts, end - 1).out,
                           param("ln_f.weight"), ln_f_mean(acts), acts.f32("ln_f.rstd"), Ns, C,
                           norm_);
    release(head_unit_);
    release(ln_f_unit_);
    if (!defer_weight_grads) {
      grads_ready(ln_f_unit_);
      // The tied wte also gets the embedding's part below, on a stage with both.
      if (head_unit_ != wte_unit_ || !stage_.embedding) grads_ready(head_unit_);
    }
  }
  // Else the caller wrote the gradient of this stage's output into d_res (output_grad()), already
  // scaled by the next stage's loss_scale.

  for (int l = end - 1; l >= first; --l) {
    const Act* in = layer_input(l);
    LayerActs a = layer_acts(acts, l);
    gather(layer_unit(l));
    if (recompute_ == Recompute::Full) {
      // Recompute the block into the workspace (its collectives too); its output is discarded
      // (h.l.out is kept), so write it to d_ln, which is free until the MLP backward below.
      LayerActs r = a;
      r.out = d_ln;
      layer_forward(l, in, r, B, T);
    } else if (!kept_per_layer("att", recompute_, precision_)) {
      be_.attention_forward(a.atty, a.att, a.qkv, B, T, Cl, NHl, NKVl);
    }
    // d_res holds d(out). MLP: out = res_attn + proj(act(fc(ln_2(res_attn))))
    const Act* d_out = gather_grad(d_res, N);
    if (cfg_.mlp == MlpKind::SwiGLU) {
      Act* d_act = work_.act("d.fc_act");
      linear_backward(d_act, layer_param(l, "mlp.proj"), true, d_out, a.fc_act, nullptr, N, Fl, C,
                      false);
      be_.swiglu_backward(d_fc, d_act, a.fc, N, Fl);
    } else {
      linear_backward(d_fc, layer_param(l, "mlp.proj"), true, d_out, a.fc_act, a.fc, N, Fl, C,
                      false);
    }
    linear_backward(d_ln, layer_param(l, "mlp.fc"), true, d_fc, a.ln_2, nullptr, N, C, FCl, false);
    // the residual branch's gradient is already in d_res; add the norm branch's
    be_.layernorm_backward(d_res, grad(layer_param(l, "ln_2.weight")),
                           grad_or_null(layer_param(l, "ln_2.bias")), reduce_grad(d_ln, N),
                           a.res_attn, w(l, "ln_2.weight"), a.ln_2_mean, a.ln_2_rstd, Ns, C, norm_);
    // Attention: res_attn = in + proj(attention(rope(qkv(ln_1(in)))))
    const Act* d_res_attn = gather_grad(d_res, N);
    linear_backward(d_atty, layer_param(l, "attn.proj"), true, d_res_attn, a.atty, nullptr, N, Cl,
                    C, false);
    be_.attention_backward(d_qkv, d_atty, a.qkv, a.atty, a.att, B, T, Cl, NHl, NKVl);
    // The rotation's backward is the inverse rotation of the rotated q and k gradients.
    if (cfg_.rope()) be_.rope(d_qkv, B, T, NHl, NKVl, cfg_.head_size(), cfg_.rope_theta, true);
    linear_backward(d_ln, layer_param(l, "attn.qkv"), true, d_qkv, a.ln_1, nullptr, N, C, QKVl,
                    false);
    be_.layernorm_backward(d_res, grad(layer_param(l, "ln_1.weight")),
                           grad_or_null(layer_param(l, "ln_1.bias")), reduce_grad(d_ln, N), in,
                           w(l, "ln_1.weight"), a.ln_1_mean, a.ln_1_rstd, Ns, C, norm_);
    release(layer_unit(l));
    if (!defer_weight_grads) grads_ready(layer_unit(l));
  }
  if (stage_.embedding) {
    // The embedding's gradients are weight gradients too: deferred with a copy of d(embed).
    const Act* d_embed = t == 1 ? d_res : gather_grad(d_res, N);
    if (defer_weight_grads) {
      p.d_embed = keep(p, d_embed, int64_t{N} * C);
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

void Gpt::embedding_weight_grads(const Pending& p, const Act* d_embed) {
  const int C = cfg_.n_embd, t = tp_.size();
  float* dwpe = grad_or_null("wpe");
  if (t == 1) {
    be_.embedding_backward(grad("wte"), dwpe, d_embed, p.tokens, p.B, p.T, C);
  } else {
    const int Vl = static_cast<int>(cfg_.padded_vocab() / t);
    be_.embedding_backward_shard(grad("wte"), dwpe, d_embed, p.tokens, p.B, p.T, C, tp_.rank() * Vl,
                                 Vl);
  }
}

void Gpt::backward_weights(int slot) {
  WEFT_CHECK(slot >= 0 && slot < slots(), "slot ", slot, " outside the ", slots(), " allocated");
  Pending& p = pending_[slot];
  WEFT_CHECK(p.weights_due, "backward_weights() needs a backward() that deferred them, slot ",
             slot);
  for (const Deferred& d : p.deferred) {
    be_.linear_backward(nullptr, grad(d.dweight), d.dbias.empty() ? nullptr : grad(d.dbias), d.dout,
                        d.inp, nullptr, nullptr, d.N, d.IC, d.OC);
  }
  p.deferred.clear();
  if (stage_.embedding) {
    embedding_weight_grads(p, p.d_embed);
    p.d_embed = nullptr;
  }
  p.deferred_used = 0;
  p.weights_due = false;
  // Every unit's gradient is complete now (the weight GEMMs need no parameters: nothing gathered).
  for (int u = static_cast<int>(layout_.units.size()) - 1; u >= 0; --u) grads_ready(u);
  if (hooks_ != nullptr) hooks_->backward_done();
}

std::vector<optim::GradPart> Gpt::whole_grads() const {
  WEFT_CHECK(grads_.size() > 0, "this model's gradients are held by its optimizer");
  std::vector<optim::GradPart> parts;
  const auto& slices = layout_.buffer.slices();
  for (size_t i = 0; i < slices.size(); ++i) {
    parts.push_back({i, const_cast<float*>(grads_.data()) + slices[i].offset, slices[i].numel});
  }
  return parts;
}

void Gpt::finish_grad_sync(std::span<const optim::GradPart> parts) {
  if (!sp_) return;
  // One all-reduce for all LayerNorm gradients: pack, reduce, unpack (in the backend's memory).
  const auto& slices = layout_.buffer.slices();
  float* packed = work_.f32("ln.packed");
  int64_t total = 0;
  for (const optim::GradPart& g : parts) {
    if (!is_layernorm_param(slices[g.slice].name)) continue;
    be_.copy(packed + total, g.grad, g.n * 4);
    total += g.n;
  }
  WEFT_CHECK(total <= work_.layout.f32.at("ln.packed").numel, "LayerNorm gradients overflow");
  tp_.comm->all_reduce_async(packed, total, comm::DataType::F32, comm::ReduceOp::Sum).order();
  total = 0;
  for (const optim::GradPart& g : parts) {
    if (!is_layernorm_param(slices[g.slice].name)) continue;
    be_.copy(g.grad, packed + total, g.n * 4);
    total += g.n;
  }
}

}  // namespace weft::model
