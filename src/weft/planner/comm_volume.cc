#include "weft/planner/comm_volume.h"

#include <fmt/format.h>

namespace weft::planner {

int64_t local_parameters(const model::GptConfig& m, const ParallelConfig& c, int pp_rank) {
  const int64_t h = m.n_embd, t = c.tp, Vp = m.padded_vocab();
  // Per layer: qkv 3h*h + 3h (column-parallel: /t), proj h*h/t + h (bias replicated), fc 4h*h +
  // 4h (/t), fc proj 4h*h/t + h, two LayerNorms 4h (replicated).
  const int64_t per_layer = (3 * h * h + 3 * h + h * h + 4 * h * h + 4 * h + 4 * h * h) / t + 6 * h;
  const int64_t layers = m.n_layer / c.pp;
  int64_t n = layers * per_layer;
  if (pp_rank == 0) n += Vp / t * h + static_cast<int64_t>(m.max_seq_len) * h;
  if (pp_rank == c.pp - 1) {
    n += 2 * h;                     // ln_f
    if (c.pp > 1) n += Vp / t * h;  // the tied word embedding's copy for the LM head
  }
  return n;
}

namespace {

void add(OpVolume& v, int64_t ops, int64_t elements_each, int64_t element_bytes) {
  v.ops += ops;
  v.elements += ops * elements_each;
  v.bytes += ops * elements_each * element_bytes;
}

// tp and pp traffic of one microbatch on pipeline rank r.
StepVolume per_microbatch(const Job& job, const ParallelConfig& c, int r) {
  StepVolume v;
  const model::GptConfig& m = job.model;
  const int64_t b = c.micro_batch, s = job.seq_len, h = m.n_embd;
  const int64_t n = b * s * h;
  const int64_t layers = m.n_layer / c.pp;
  const int64_t e = precision_bytes(job.precision).activation;
  if (c.tp > 1) {
    // Forward passes that run the layer's collectives: the forward, plus the recomputed one.
    const int64_t forwards = c.recompute == model::Recompute::Full ? 2 : 1;
    if (c.sequence_parallel) {
      add(v.tp.all_gather, layers * 2 * (forwards + 1), n, e);
      add(v.tp.reduce_scatter, layers * 2 * (forwards + 1), n, e);
    } else {
      add(v.tp.all_reduce, layers * 2 * (forwards + 1), n, e);
    }
    if (r == 0) {  // vocab-parallel embedding
      if (c.sequence_parallel) {
        add(v.tp.reduce_scatter, 1, n, e);
        add(v.tp.all_gather, 1, n, e);
      } else {
        add(v.tp.all_reduce, 1, n, e);
      }
    }
    if (r == c.pp - 1) {  // vocab-parallel cross-entropy (Max, then Sum of two) and LM head
      add(v.tp.all_reduce, 1, b * s, 4);
      add(v.tp.all_reduce, 1, 2 * b * s, 4);
      if (c.sequence_parallel) {
        add(v.tp.all_gather, 1, n, e);  // ln_f's output, gathered for the LM head
        add(v.tp.reduce_scatter, 1, n, e);
      } else {
        add(v.tp.all_reduce, 1, n, e);
      }
    }
  }
  if (c.pp > 1) {
    // With tp > 1 a stage boundary tensor goes as 1/t of its rows per tp rank: split already
    // under sequence parallelism, else scattered and all-gathered over tp on arrival (weft's
    // runtime always does the PTD-P paper's scatter/gather, section 4.1).
    const int64_t message = n / c.tp;
    const int64_t gathers = c.tp > 1 && !c.sequence_parallel ? 1 : 0;
    const int stages = c.pp * c.vp;
    for (int chunk = 0; chunk < c.vp; ++chunk) {
      const int stage = chunk * c.pp + r;
      if (stage < stages - 1) {  // activation out, gradient in
        add(v.pp.send, 1, message, e);
        add(v.pp.recv, 1, message, e);
        add(v.tp.all_gather, gathers, n, e);
      }
      if (stage > 0) {  // activation in, gradient out
        add(v.pp.recv, 1, message, e);
        add(v.pp.send, 1, message, e);
        add(v.tp.all_gather, gathers, n, e);
      }
    }
  }
  return v;
}

void scale(GroupVolume& g, int64_t k) {
  for (OpVolume* o : {&g.all_reduce, &g.reduce_scatter, &g.all_gather, &g.send, &g.recv}) {
    o->ops *= k;
    o->elements *= k;
    o->bytes *= k;
  }
}

}  // namespace

StepVolume microbatch_volume(const Job& job, const ParallelConfig& c, int pp_rank) {
  return per_microbatch(job, c, pp_rank);
}

StepVolume step_volume(const Job& job, const ParallelConfig& c, int pp_rank) {
  StepVolume v = per_microbatch(job, c, pp_rank);
  const int64_t m = c.microbatches(job);
  scale(v.tp, m);
  scale(v.pp, m);
  if (c.dp > 1) {
    const int64_t params = local_parameters(job.model, c, pp_rank);
    const PrecisionBytes pb = precision_bytes(job.precision);
    switch (c.zero) {
      case 0:
        add(v.dp.all_reduce, 1, params, pb.grad);
        break;
      case 1:
      case 2:
        add(v.dp.reduce_scatter, 1, params, pb.grad);
        add(v.dp.all_gather, 1, params, pb.weight);
        break;
      default:
        add(v.dp.all_gather, 2 * m, params, pb.weight);
        add(v.dp.reduce_scatter, m, params, pb.grad);
        break;
    }
  }
  if (c.tp > 1 && c.sequence_parallel) {
    // Once per step and model chunk, the LayerNorm gradients of this rank's rows, summed over tp
    // in one call: weight and bias of 2 LayerNorms per layer, and ln_f on the last stage.
    const int stages = c.pp * c.vp;
    for (int chunk = 0; chunk < c.vp; ++chunk) {
      const int stage = chunk * c.pp + pp_rank;
      const int64_t norms = 2 * (job.model.n_layer / stages) + (stage == stages - 1 ? 1 : 0);
      add(v.tp.all_reduce, 1, norms * 2 * job.model.n_embd, precision_bytes(job.precision).grad);
    }
  }
  if (c.pp > 1) add(v.pp.all_reduce, 1, 1, 8);  // the step's loss, from the last stage (fp64)
  if (c.pp > 1 && (pp_rank == 0 || pp_rank == c.pp - 1)) {
    add(v.embedding.all_reduce, 1, job.model.padded_vocab() / c.tp * job.model.n_embd,
        precision_bytes(job.precision).grad);
  }
  return v;
}

std::string format_volume(const StepVolume& v) {
  std::string out;
  auto group = [&](const char* name, const GroupVolume& g) {
    auto op = [&](const char* what, const OpVolume& o) {
      if (o.ops > 0) {
        out += fmt::format("  {:<9} {:<14} {:>6} calls {:>16} elements {:>16} bytes\n", name, what,
                           o.ops, o.elements, o.bytes);
      }
    };
    op("all_reduce", g.all_reduce);
    op("reduce_scatter", g.reduce_scatter);
    op("all_gather", g.all_gather);
    op("send", g.send);
    op("recv", g.recv);
  };
  group("tp", v.tp);
  group("pp", v.pp);
  group("dp", v.dp);
  group("embedding", v.embedding);
  return out;
}

}  // namespace weft::planner
