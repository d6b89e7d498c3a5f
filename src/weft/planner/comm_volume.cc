#include "weft/planner/comm_volume.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/check.h"
#include "weft/model/param_layout.h"
#include "weft/optim/shards.h"

namespace weft::planner {

int64_t local_parameters(const model::GptConfig& m, const layout::Layout& c, int pp_rank) {
  // Counted by the model's own layout (model/param_layout.h), so that every variant's tensors are
  // said once: one layer (layers are all alike) and each kind of end a rank may hold. A layout
  // costs microseconds and the search asks for the same model and tp tens of thousands of times:
  // the last answer is kept, per thread.
  struct Counts {
    model::GptConfig model;
    int tp = 0;
    int64_t layer = 0, ends[2][2] = {};  // [embedding][head]
  };
  thread_local Counts last;
  if (last.tp != c.tp || last.model != m) {
    auto count = [&](int layers, bool embedding, bool head) {
      return model::gpt_param_layout(
                 m, c.tp, 0,
                 {.first_layer = 0, .layers = layers, .embedding = embedding, .head = head})
          .count();
    };
    Counts now{m, c.tp, count(1, false, false)};
    for (int e = 0; e < 2; ++e) {
      for (int h = 0; h < 2; ++h) now.ends[e][h] = count(0, e, h);
    }
    last = now;  // only once every count is in (a layout throws for an invalid model)
  }
  return int64_t{m.n_layer / c.pp} * last.layer + last.ends[pp_rank == 0][pp_rank == c.pp - 1];
}

namespace {

void add(OpVolume& v, int64_t ops, int64_t elements_each, int64_t element_bytes) {
  v.ops += ops;
  v.elements += ops * elements_each;
  v.bytes += ops * elements_each * element_bytes;
}

// The data-parallel traffic of optim::DistributedOptimizer on pipeline rank r, unit by unit
// (optim::ParamUnit: wte, wpe, each layer, ln_f, lm_head; those the variant has), each unit
// padded for dp equal shards:
//   ZeRO 0: one all-reduce per unit after the last microbatch
//   ZeRO 1: one reduce-scatter per unit, one all-gather of the updated parameters after the step
//   ZeRO 2: a reduce-scatter per unit and microbatch, one all-gather per unit after the step
//   ZeRO 3: a reduce-scatter per unit and microbatch; an all-gather of a unit before each use:
//           forward and backward of every layer, of ln_f and of an untied lm_head, wpe in
//           forward, wte in the embedding's forward and, tied, in the head's forward and backward
void data_parallel(GroupVolume& v, const Job& job, const layout::Layout& c, int r) {
  const model::GptConfig& m = job.model;
  const PrecisionBytes pb = precision_bytes(job.precision);
  const int64_t mb = c.microbatches(job.global_batch);
  const int stages = c.pp * c.vp;
  for (int chunk = 0; chunk < c.vp; ++chunk) {
    const model::StageSpec st = model::pipeline_stage(m, chunk * c.pp + r, stages);
    // The stage's units with one layer standing for all of them (layers are all alike).
    const model::ParamLayout one = model::gpt_param_layout(
        m, c.tp, 0, {.first_layer = 0, .layers = 1, .embedding = st.embedding, .head = st.head},
        optim::zero_unit_align(c.zero, c.dp));
    // (unit elements, its uses per microbatch under ZeRO 3), in buffer order.
    std::vector<std::pair<int64_t, int>> units;
    for (const optim::ParamUnit& u : one.units) {
      if (u.name == "h.0") {
        for (int l = 0; l < st.layers; ++l) units.push_back({u.numel(), 2});
      } else if (u.name == "wte") {
        units.push_back({u.numel(), st.embedding + (st.head && m.tie_embeddings ? 2 : 0)});
      } else if (u.name == "wpe") {
        units.push_back({u.numel(), 1});
      } else {
        WEFT_CHECK(u.name == "ln_f" || u.name == "lm_head", "unit ", u.name, " is not priced");
        units.push_back({u.numel(), 2});
      }
    }
    for (const auto& [n, uses] : units) {
      if (c.zero == 0) {
        add(v.all_reduce, 1, n, pb.grad);
        continue;
      }
      const int64_t padded = optim::zero_padded_size(n, c.dp);
      add(v.reduce_scatter, c.zero >= 2 ? mb : 1, padded, pb.grad);
      add(v.all_gather, c.zero >= 3 ? mb * uses : 1, padded, pb.weight);
    }
  }
}

void scale(GroupVolume& g, int64_t k) {
  for (OpVolume* o : {&g.all_reduce, &g.reduce_scatter, &g.all_gather, &g.send, &g.recv}) {
    o->ops *= k;
    o->elements *= k;
    o->bytes *= k;
  }
}

}  // namespace

StepVolume microbatch_volume(const Job& job, const layout::Layout& c, int r) {
  StepVolume v;
  const model::GptConfig& m = job.model;
  const int64_t b = c.micro_batch, s = job.seq_len, h = m.n_embd;
  const int64_t n = b * s * h;
  const int64_t layers = m.n_layer / c.pp;
  const int64_t e = precision_bytes(job.precision).activation;
  if (c.tp > 1) {
    // `ops` reductions of an activation over tp: all-reduces, or under sequence parallelism as
    // many all-gathers and reduce-scatters.
    const auto reduce = [&](int64_t ops) {
      if (c.sequence_parallel) {
        add(v.tp.all_gather, ops, n, e);
        add(v.tp.reduce_scatter, ops, n, e);
      } else {
        add(v.tp.all_reduce, ops, n, e);
      }
    };
    // Forward passes that run the layer's collectives: the forward, plus the recomputed one.
    const int64_t forwards = c.recompute == model::Recompute::Full ? 2 : 1;
    reduce(layers * 2 * (forwards + 1));
    if (r == 0) reduce(1);  // vocab-parallel embedding
    if (r == c.pp - 1) {
      // Vocab-parallel cross-entropy: one all-gather of 3 fp32 statistics per row
      // (kernels/vocab_parallel_ce.h), t * 3bs elements gathered; then the LM head (under
      // sequence parallelism ln_f's output is gathered for it).
      add(v.tp.all_gather, 1, c.tp * 3 * b * s, 4);
      reduce(1);
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

StepVolume step_volume(const Job& job, const layout::Layout& c, int pp_rank, int dp_rank) {
  StepVolume v = microbatch_volume(job, c, pp_rank);
  const int64_t m = c.microbatches(job.global_batch);
  scale(v.tp, m);
  scale(v.pp, m);
  if (c.dp > 1) {
    add(v.dp.all_reduce, 1, 1, 8);                  // the step's loss, averaged over replicas
    if (c.zero > 0) add(v.dp.all_reduce, 1, 1, 8);  // the gradient norm's shards
    data_parallel(v.dp, job, c, pp_rank);
  }
  const bool sharded = c.zero > 0 && c.dp > 1;  // the gradient work below is on dp shards
  if (c.tp > 1 && c.sequence_parallel) {
    // Once per step and model chunk, the norm gradients of this rank's rows, summed over tp in
    // one call: the weights (and LayerNorm's biases) of 2 norms per layer, and ln_f on the last
    // stage; with ZeRO the parts of them in this dp rank's shard.
    const int stages = c.pp * c.vp;
    for (int chunk = 0; chunk < c.vp; ++chunk) {
      const int stage = chunk * c.pp + pp_rank;
      const model::ParamLayout layout = model::gpt_param_layout(
          job.model, c.tp, 0, model::pipeline_stage(job.model, stage, stages),
          optim::zero_unit_align(c.zero, c.dp));
      int64_t n = 0;
      if (!sharded) {
        for (const SliceSpec& sl : layout.buffer.slices()) {
          if (model::is_layernorm_param(sl.name)) n += sl.numel;
        }
      } else {
        for (const optim::OwnedPart& p : optim::zero_owned_parts(layout, c.zero, c.dp, dp_rank)) {
          if (model::is_layernorm_param(layout.buffer.slices()[p.slice].name)) n += p.n;
        }
      }
      add(v.tp.all_reduce, 1, n, precision_bytes(job.precision).grad);
    }
  }
  if (c.pp > 1) add(v.pp.all_reduce, 1, 1, 8);  // the step's loss, from the last stage (fp64)
  if (c.pp > 1 && job.model.tie_embeddings && (pp_rank == 0 || pp_rank == c.pp - 1)) {
    // The tied word embedding, a unit of its own: whole, or this dp rank's shard of it (an untied
    // LM head has nothing to keep in sync).
    const int64_t wte = job.model.padded_vocab() / c.tp * job.model.n_embd;
    const optim::ShardRange own = optim::zero_shard(wte, sharded ? c.dp : 1, sharded ? dp_rank : 0);
    add(v.embedding.all_reduce, 1, std::max<int64_t>(0, std::min(own.end, wte) - own.begin),
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
