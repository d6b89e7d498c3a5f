#include "weft/planner/stage_costs.h"

#include "weft/model/flops.h"
#include "weft/planner/comm_volume.h"

namespace weft::planner {

double compute_peak(const Cluster& c, Precision p) {
  if (p == Precision::FP32) return c.peak(NumberFormat::FP32);
  return c.peak(NumberFormat::BF16) > 0 ? c.peak(NumberFormat::BF16) : c.peak(NumberFormat::FP16);
}

namespace {

// Shapes and sizes of one layer on one device, named as in docs/planner.md §3. The variant's
// widths on this rank (model/gpt_config.h): q = qkv_width/t columns of attn.qkv ((a + 2 NKV) d/t),
// f = fc_width/t of mlp.fc (F/t, SwiGLU's gate and up 2F/t), F = F/t inputs of mlp.proj.
struct LayerShape {
  int64_t b, s, h, a, t, M, d, heads;  // M = b*s rows, d head size, heads = b*a/t attention GEMMs
  int64_t q, f, F;
  double n, act, A, e;  // n = b*s*h; act: the rows a LayerNorm or dropout sees
  double mlp;           // elements the MLP's activation kernel reads and writes
  double rope;          // elements RoPE reads and writes (q and k), 0 with learned positions
  bool sp;
};

LayerShape shape_of(const Job& job, const layout::Layout& c) {
  LayerShape l;
  l.b = c.micro_batch;
  l.s = job.seq_len;
  l.h = job.model.n_embd;
  l.a = job.model.n_head;
  l.t = c.tp;
  l.M = l.b * l.s;
  l.d = l.h / l.a;
  l.heads = l.b * l.a / l.t;
  const model::GptConfig& m = job.model;
  l.q = m.qkv_width() / l.t;
  l.f = m.fc_width() / l.t;
  l.F = m.ffn() / l.t;
  // The fused bias-GeLU reads and writes the F/t intermediate; SwiGLU reads gate and up, writes
  // their product.
  l.mlp = static_cast<double>(l.M) * (l.f + l.F);
  // Rotating q and k (NH + NKV heads of d, split by t): one read and one write.
  l.rope = m.rope() ? 2.0 * l.M * (m.n_head + m.kv_heads()) * l.d / l.t : 0;
  l.n = static_cast<double>(l.M) * l.h;
  l.sp = c.sequence_parallel;
  l.act = l.sp ? l.n / l.t : l.n;
  l.A = static_cast<double>(l.heads) * l.s * l.s;
  l.e = precision_bytes(job.precision).activation;
  return l;
}

// Bytes the memory-bound kernels of one layer's forward stream: 2 norms (LayerNorm or RMSNorm:
// read, write), 2 fused bias-dropout-residual adds (read 2, write 1, a 1-byte mask), the MLP's
// activation (the fused bias-GeLU on the 4h/t intermediate, 8n/t elements, or SwiGLU), RoPE on q
// and k, and on the b*a/t*s*s scores the fused scale-mask-softmax and the attention dropout (with
// its mask). Backward streams twice as much (each reads a gradient and a saved input and writes a
// gradient).
// With a fused attention kernel (Cluster::flash_attention) the scores never reach memory: no A
// terms.
double forward_memory_bytes(const LayerShape& l, bool flash) {
  const double scores = flash ? 0 : l.A;
  return l.e * (4 * l.act + 6 * l.act + l.mlp + l.rope + 4 * scores) + 2 * l.act + scores;
}
double attention_core_memory_bytes(const LayerShape& l) { return l.e * 4 * l.A + l.A; }

// A fused attention kernel's forward and backward times (Cluster::flash_attention): FLOPs as
// FlashAttention-2 counts them, causal, over this rank's b*a/t heads: forward 4 s^2 d / 2 a head,
// backward 2.5x that, at the preset's measured rates.
double flash_forward_time(const Cluster& cl, const LayerShape& l) {
  return cl.compute_scale * 2.0 * static_cast<double>(l.heads) * l.s * l.s * l.d / cl.flash_forward;
}
double flash_backward_time(const Cluster& cl, const LayerShape& l) {
  return cl.compute_scale * 2.5 * 2.0 * static_cast<double>(l.heads) * l.s * l.s * l.d /
         cl.flash_backward;
}

// One tensor-parallel collective inside a step: its time on the link and the cost of meeting the
// other ranks there (Cluster::tp_collective_overhead).
double tp_collective(const Cluster& cl, const GroupLink& tp, Collective op, double bytes) {
  if (tp.size <= 1) return 0;
  return collective_time(tp, op, bytes) + cl.tp_collective_overhead;
}

// Two all-reduces of b*s*h, or with sequence parallelism two all-gathers and two
// reduce-scatters of it (the all-reduce's two halves).
double tp_pass_time(const Cluster& cl, const LayerShape& l, const GroupLink& tp) {
  const double bytes = l.n * l.e;
  if (l.sp) {
    return 2 * (tp_collective(cl, tp, Collective::AllGather, bytes) +
                tp_collective(cl, tp, Collective::ReduceScatter, bytes));
  }
  return 2 * tp_collective(cl, tp, Collective::AllReduce, bytes);
}

// Costs of one transformer layer (the same on every stage).
StageCost layer_cost(const StageCostInputs& in) {
  const Cluster& cl = *in.cluster;
  const LayerShape l = shape_of(*in.job, *in.config);
  const double peak = compute_peak(cl, in.job->precision);
  auto G = [&](int64_t M, int64_t N, int64_t K, int64_t batch = 1) {
    return gemm_time(cl, peak, M, N, K, batch);
  };
  const int64_t M = l.M, h = l.h, t = l.t, s = l.s, d = l.d, heads = l.heads;
  const int64_t q = l.q, f = l.f, F = l.F;
  // The four linears' weights on this rank (qkv q x h, proj h x h/t, fc f x h, fc proj h x F;
  // GPT-2: 12h^2/t): each GEMM call passes over its weight-sized operand once more, whatever its M
  // (hardware.h, Cluster::weight_passes).
  const double linear_weights = model::layer_linear_weights(in.job->model) / t;
  const PrecisionBytes pb = precision_bytes(in.job->precision);
  StageCost c;
  // Forward: qkv, attention scores and context (batched over b*a/t heads, or one fused kernel),
  // proj, fc, fc proj.
  const bool flash = cl.flash_attention();
  const double attention_forward =
      flash ? flash_forward_time(cl, l) : G(s, s, d, heads) + G(s, d, s, heads);
  c.forward.compute = G(M, q, h) + G(M, h, h / t) + G(M, f, h) + G(M, h, F) + attention_forward +
                      memory_time(cl, forward_memory_bytes(l, flash)) +
                      weight_pass_time(cl, linear_weights * pb.weight);
  c.forward.tp_comm = tp_pass_time(cl, l, in.placement->tp);
  // Input gradients: dX = dY W for the four linears, the four attention GEMMs' gradients (or the
  // fused kernel's backward).
  const double attention_backward =
      flash ? flash_backward_time(cl, l) : 3 * G(s, d, s, heads) + G(s, s, d, heads);
  c.backward_input.compute = G(M, h, q) + G(M, h / t, h) + G(M, h, f) + G(M, F, h) +
                             attention_backward +
                             memory_time(cl, 2 * forward_memory_bytes(l, flash)) +
                             weight_pass_time(cl, linear_weights * pb.weight);
  c.backward_input.tp_comm = tp_pass_time(cl, l, in.placement->tp);
  // Weight gradients: dW = dY^T X, inner dimension M, accumulated into the gradient buffer.
  c.backward_weight.compute = G(q, h, M) + G(h, h / t, M) + G(f, h, M) + G(h, F, M) +
                              weight_pass_time(cl, linear_weights * pb.grad);
  if (in.config->recompute == model::Recompute::Selective) {
    c.recompute.compute =
        attention_forward + (flash ? 0 : memory_time(cl, attention_core_memory_bytes(l)));
  }
  if (in.config->recompute == model::Recompute::Full) c.recompute = c.forward;
  return c;
}

}  // namespace

std::vector<StageCost> stage_costs(const StageCostInputs& in) {
  const Cluster& cl = *in.cluster;
  const Job& job = *in.job;
  const layout::Layout& cfg = *in.config;
  const LayerShape l = shape_of(job, cfg);
  const double peak = compute_peak(cl, job.precision);
  const GroupLink& tp = in.placement->tp;
  const int stages = cfg.pp * cfg.vp;
  const int layers = job.model.n_layer / stages;
  const StageCost one = layer_cost(in);
  auto times = [](PassCost p, double k) {
    p.compute *= k;
    p.tp_comm *= k;
    p.dp_comm *= k;
    return p;
  };
  std::vector<StageCost> out(stages);
  for (int s = 0; s < stages; ++s) {
    StageCost& c = out[s];
    c.forward = times(one.forward, layers);
    c.recompute = times(one.recompute, layers);
    c.backward_input = times(one.backward_input, layers);
    c.backward_weight = times(one.backward_weight, layers);
  }
  const double nbytes = l.n * l.e;
  // Embedding: gather rows of wte and wpe, add (read 2, write 1; with RoPE wte's rows only: read
  // 1, write 1); its gradient scatters back.
  // Vocab-parallel: an all-reduce of the output (sp: a reduce-scatter; all-gather backward).
  {
    StageCost& c = out.front();
    const double streams = job.model.rope() ? 2 : 3;
    c.forward.compute += memory_time(cl, streams * nbytes);
    c.backward_weight.compute += memory_time(cl, streams * nbytes);
    if (l.sp) {
      c.forward.tp_comm += tp_collective(cl, tp, Collective::ReduceScatter, nbytes);
      c.backward_weight.tp_comm += tp_collective(cl, tp, Collective::AllGather, nbytes);
    } else {
      c.forward.tp_comm += tp_collective(cl, tp, Collective::AllReduce, nbytes);
    }
  }
  // Head: ln_f, logits [M, Vp/t] = x W^T, fp32 softmax cross-entropy (reads the logits twice,
  // writes their gradient), the all-reduces of the vocab-parallel loss and of the input gradient.
  {
    StageCost& c = out.back();
    const int64_t Vt = job.model.padded_vocab() / l.t;
    const double logits_bytes = static_cast<double>(l.M) * Vt * 4;
    const double wte = static_cast<double>(Vt) * l.h;  // the head's weight: wte, or lm_head
    const PrecisionBytes pb = precision_bytes(job.precision);
    c.forward.compute += gemm_time(cl, peak, l.M, Vt, l.h) +
                         memory_time(cl, 4 * l.act * l.e + 2 * logits_bytes) +
                         weight_pass_time(cl, wte * pb.weight);
    // The vocabulary-parallel cross-entropy's one all-gather of three fp32 statistics per row
    // from every rank (kernels/vocab_parallel_ce.h).
    c.forward.tp_comm += tp_collective(cl, tp, Collective::AllGather, l.t * l.M * 3 * 4.0);
    c.backward_input.compute += gemm_time(cl, peak, l.M, l.h, Vt) +
                                memory_time(cl, 2 * logits_bytes + 6 * l.act * l.e) +
                                weight_pass_time(cl, wte * pb.weight);
    c.backward_input.tp_comm +=
        tp_collective(cl, tp, l.sp ? Collective::ReduceScatter : Collective::AllReduce, nbytes);
    c.backward_weight.compute +=
        gemm_time(cl, peak, Vt, l.h, l.M) + weight_pass_time(cl, wte * pb.grad);
  }
  // ZeRO-2 and 3 reduce-scatter a stage's gradients after each microbatch, ZeRO-3 also gathers
  // its weights before its forward and again before its backward (Rajbhandari et al. 2020, §5.2,
  // §5.3; optim/distributed_optimizer.h), charged to the passes. A gather is needed before the
  // pass can start: exposed whole.
  if (cfg.zero >= 2 && cfg.dp > 1) {
    const PrecisionBytes pb = precision_bytes(job.precision);
    for (int s = 0; s < stages; ++s) {
      const double params =
          static_cast<double>(local_parameters(job.model, cfg, s % cfg.pp)) / cfg.vp;
      const GroupLink& dp = in.placement->dp;
      // Each pass's reduce-scatters overlap that pass's backward as ZeRO 0/1's final reductions
      // overlap the last one (exposed_reduction).
      const double reduce = collective_time(dp, Collective::ReduceScatter, params * pb.grad);
      const double layers = static_cast<double>(job.model.n_layer) / stages;
      out[s].backward_weight.dp_comm +=
          in.overlap_dp ? exposed_reduction(reduce, out[s].backward().total(), layers) : reduce;
      // The unit pool's buffer is written before each pass adds to it: zeros, and the step's sum
      // so far in this rank's block (so the reduce-scatter writes the new sum straight into the
      // shard, with no accumulation after it): one write of the stage's gradients.
      out[s].backward_weight.compute += memory_time(cl, params * pb.grad);
      if (cfg.zero < 3) continue;
      out[s].forward.dp_comm += collective_time(dp, Collective::AllGather, params * pb.weight);
      out[s].backward_input.dp_comm +=
          collective_time(dp, Collective::AllGather, params * pb.weight);
    }
  }
  return out;
}

}  // namespace weft::planner
