#include "weft/model/gpt.h"

#include <string>

#include "weft/core/check.h"
#include "weft/kernels/kernels.h"
#include "weft/model/activation_layout.h"

namespace weft::model {

namespace k = weft::kernels::cpu;

// Pointers to one layer's activations: into its own slices when kept, else into the scratch.
struct Gpt::LayerActs {
  float *ln_1, *ln_1_mean, *ln_1_rstd, *qkv, *att, *atty, *res_attn;
  float *ln_2, *ln_2_mean, *ln_2_rstd, *fc, *fc_gelu, *out;
};

Gpt::Gpt(const GptConfig& cfg, int B, int T, Recompute recompute)
    : cfg_(cfg), B_(B), T_(T), recompute_(recompute) {
  Status s = validate_for_run(cfg, T);
  if (B <= 0) s.add("batch size " + std::to_string(B) + " must be > 0");
  s.throw_if_error("invalid model config '" + cfg.name + "'");
  layout_ = gpt_param_layout(cfg_);
  params_ = FlatBuffer(layout_.buffer);
  grads_ = FlatBuffer(layout_.buffer);
  acts_ = FlatBuffer(gpt_activation_layout(cfg_, B, T, recompute));
  work_ = FlatBuffer(gpt_grad_workspace_layout(cfg_, B, T));
}

Gpt::LayerActs Gpt::layer_acts(int l) {
  const std::string own = "h." + std::to_string(l) + ".";
  auto p = [&](const char* name) {
    return acts_.ptr((kept_per_layer(name, recompute_) ? own : std::string("layer.")) + name);
  };
  return LayerActs{p("ln_1"), p("ln_1.mean"), p("ln_1.rstd"), p("qkv"),       p("att"),
                   p("atty"), p("res_attn"),  p("ln_2"),      p("ln_2.mean"), p("ln_2.rstd"),
                   p("fc"),   p("fc_gelu"),   p("out")};
}

// One pre-LN transformer block (GPT-2):
//   res_attn = in + attn.proj(attention(attn.qkv(ln_1(in))))
//   out      = res_attn + mlp.proj(gelu(mlp.fc(ln_2(res_attn))))
void Gpt::layer_forward(int l, const float* in, const LayerActs& a, int B, int T) {
  const int C = cfg_.n_embd, NH = cfg_.n_head, N = B * T;
  auto w = [&](const char* n) { return params_.ptr(layer_param(l, n)); };
  k::layernorm_forward(a.ln_1, a.ln_1_mean, a.ln_1_rstd, in, w("ln_1.weight"), w("ln_1.bias"), N,
                       C);
  k::matmul_forward(a.qkv, a.ln_1, w("attn.qkv.weight"), w("attn.qkv.bias"), N, C, 3 * C);
  k::attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
  float* proj = a.res_attn;  // attn.proj output, then the residual sum in place
  k::matmul_forward(proj, a.atty, w("attn.proj.weight"), w("attn.proj.bias"), N, C, C);
  k::residual_forward(a.res_attn, proj, in, int64_t{N} * C);
  k::layernorm_forward(a.ln_2, a.ln_2_mean, a.ln_2_rstd, a.res_attn, w("ln_2.weight"),
                       w("ln_2.bias"), N, C);
  k::matmul_forward(a.fc, a.ln_2, w("mlp.fc.weight"), w("mlp.fc.bias"), N, C, 4 * C);
  k::gelu_forward(a.fc_gelu, a.fc, int64_t{N} * 4 * C);
  k::matmul_forward(a.out, a.fc_gelu, w("mlp.proj.weight"), w("mlp.proj.bias"), N, 4 * C, C);
  k::residual_forward(a.out, a.out, a.res_attn, int64_t{N} * C);
}

float Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  WEFT_CHECK(B > 0 && B <= B_ && T > 0 && T <= T_, "forward of ", B, "x", T,
             " exceeds the allocated ", B_, "x", T_);
  const int C = cfg_.n_embd, V = cfg_.vocab_size, Vp = cfg_.padded_vocab(), N = B * T;
  for (int i = 0; i < N; ++i) {
    WEFT_CHECK(tokens[i] >= 0 && tokens[i] < V, "token ", tokens[i], " at position ", i,
               " is outside the vocabulary of ", V);
  }
  tokens_ = tokens;
  targets_ = targets;
  last_B_ = B;
  last_T_ = T;

  float* x = acts_.ptr("embed");
  k::embedding_forward(x, tokens, params_.ptr("wte"), params_.ptr("wpe"), B, T, C);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    LayerActs a = layer_acts(l);
    layer_forward(l, x, a, B, T);
    x = a.out;
  }
  float* lnf = acts_.ptr("ln_f");
  k::layernorm_forward(lnf, acts_.ptr("ln_f.mean"), acts_.ptr("ln_f.rstd"), x,
                       params_.ptr("ln_f.weight"), params_.ptr("ln_f.bias"), N, C);
  float* logits = acts_.ptr("logits");
  k::matmul_forward(logits, lnf, params_.ptr("wte"), nullptr, N, C, Vp);  // tied embedding
  if (targets == nullptr) return 0.0f;

  float* losses = acts_.ptr("losses");
  k::softmax_cross_entropy_forward(losses, logits, targets, N, V, Vp);
  double sum = 0.0;
  valid_targets_ = 0;
  for (int i = 0; i < N; ++i) {
    WEFT_CHECK(targets[i] < V, "target ", targets[i], " is outside the vocabulary of ", V);
    if (targets[i] >= 0) {
      sum += losses[i];
      ++valid_targets_;
    }
  }
  return valid_targets_ > 0 ? static_cast<float>(sum / valid_targets_) : 0.0f;
}

void Gpt::backward(float loss_scale) {
  WEFT_CHECK(targets_ != nullptr, "backward() needs a forward() with targets");
  const int B = last_B_, T = last_T_, N = B * T;
  const int C = cfg_.n_embd, NH = cfg_.n_head, V = cfg_.vocab_size, Vp = cfg_.padded_vocab();
  const int64_t NC = int64_t{N} * C;
  float* d_res = work_.ptr("d.residual");
  float* d_ln = work_.ptr("d.ln");
  float* d_atty = work_.ptr("d.atty");
  float* d_qkv = work_.ptr("d.qkv");
  float* d_fc_gelu = work_.ptr("d.fc_gelu");
  float* d_fc = work_.ptr("d.fc");
  auto zero = [](float* p, int64_t n) { std::fill(p, p + n, 0.0f); };
  auto g = [&](int l, const char* n) { return grads_.ptr(layer_param(l, n)); };
  auto w = [&](int l, const char* n) { return params_.ptr(layer_param(l, n)); };
  auto layer_input = [&](int l) {
    return l == 0 ? acts_.ptr("embed") : acts_.ptr("h." + std::to_string(l - 1) + ".out");
  };

  // Head: dlogits in place of the logits, then the tied-embedding GEMM and ln_f.
  float* logits = acts_.ptr("logits");
  const float dloss = valid_targets_ > 0 ? loss_scale / static_cast<float>(valid_targets_) : 0.0f;
  k::softmax_cross_entropy_fused(acts_.ptr("losses"), logits, targets_, dloss, N, V, Vp);
  zero(d_ln, NC);
  k::matmul_backward(d_ln, grads_.ptr("wte"), nullptr, logits, acts_.ptr("ln_f"),
                     params_.ptr("wte"), N, C, Vp);
  zero(d_res, NC);
  const float* last_out = layer_acts(cfg_.n_layer - 1).out;
  k::layernorm_backward(d_res, grads_.ptr("ln_f.weight"), grads_.ptr("ln_f.bias"), d_ln, last_out,
                        params_.ptr("ln_f.weight"), acts_.ptr("ln_f.mean"), acts_.ptr("ln_f.rstd"),
                        N, C);

  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const float* in = layer_input(l);
    LayerActs a = layer_acts(l);
    if (recompute_ == Recompute::Full) {
      // Recompute the block into scratch; its output is discarded (h.l.out is kept), so write it
      // to scratch as well.
      LayerActs r = a;
      r.out = d_fc;  // free until the MLP backward below overwrites it
      layer_forward(l, in, r, B, T);
    } else if (recompute_ == Recompute::Selective) {
      k::attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    }
    // d_res holds d(out). MLP: out = res_attn + proj(gelu(fc(ln_2(res_attn))))
    zero(d_fc_gelu, int64_t{N} * 4 * C);
    k::matmul_backward(d_fc_gelu, g(l, "mlp.proj.weight"), g(l, "mlp.proj.bias"), d_res, a.fc_gelu,
                       w(l, "mlp.proj.weight"), N, 4 * C, C);
    zero(d_fc, int64_t{N} * 4 * C);
    k::gelu_backward(d_fc, a.fc, d_fc_gelu, int64_t{N} * 4 * C);
    zero(d_ln, NC);
    k::matmul_backward(d_ln, g(l, "mlp.fc.weight"), g(l, "mlp.fc.bias"), d_fc, a.ln_2,
                       w(l, "mlp.fc.weight"), N, C, 4 * C);
    // the residual branch's gradient is already in d_res; add the LayerNorm branch's
    k::layernorm_backward(d_res, g(l, "ln_2.weight"), g(l, "ln_2.bias"), d_ln, a.res_attn,
                          w(l, "ln_2.weight"), a.ln_2_mean, a.ln_2_rstd, N, C);
    // Attention: res_attn = in + proj(attention(qkv(ln_1(in))))
    zero(d_atty, NC);
    k::matmul_backward(d_atty, g(l, "attn.proj.weight"), g(l, "attn.proj.bias"), d_res, a.atty,
                       w(l, "attn.proj.weight"), N, C, C);
    zero(d_qkv, int64_t{N} * 3 * C);
    k::attention_backward(d_qkv, d_atty, a.qkv, a.att, B, T, C, NH);
    zero(d_ln, NC);
    k::matmul_backward(d_ln, g(l, "attn.qkv.weight"), g(l, "attn.qkv.bias"), d_qkv, a.ln_1,
                       w(l, "attn.qkv.weight"), N, C, 3 * C);
    k::layernorm_backward(d_res, g(l, "ln_1.weight"), g(l, "ln_1.bias"), d_ln, in,
                          w(l, "ln_1.weight"), a.ln_1_mean, a.ln_1_rstd, N, C);
  }
  k::embedding_backward(grads_.ptr("wte"), grads_.ptr("wpe"), d_res, tokens_, B, T, C);
  targets_ = nullptr;  // the logits are gone; a second backward needs a new forward
}

}  // namespace weft::model
