#include "weft/planner/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "weft/layout/rank.h"
#include "weft/model/flops.h"
#include "weft/planner/comm_volume.h"
#include "weft/schedule/schedule.h"
#include "weft/schedule/send_buffers.h"

namespace weft::planner {

const ScheduleCache::Entry& ScheduleCache::get(schedule::Kind kind, const schedule::Shape& shape) {
  const auto key = std::make_tuple(static_cast<int>(kind), shape.pp, shape.vp, shape.microbatches);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    Entry e;
    e.schedule = schedule::add_optimizer_step(
        schedule::add_communication(schedule::make_schedule(kind, shape).value_or_throw()));
    e.in_flight = schedule::peak_in_flight(e.schedule);  // checks the structure once, for all
    e.slots = layout::pool_slots(e.schedule);
    e.buffers = schedule::send_buffers(e.schedule);
    it = entries_.emplace(key, std::move(e)).first;
  }
  return it->second;
}

namespace {

// Bytes the optimizer step streams per parameter of its shard: AdamW reads the gradient, the
// weights (fp32 master for mixed precision) and both moments and writes back weights and
// moments; mixed precision also writes the bf16 copy.
double optimizer_bytes_per_param(Precision p) {
  return p == Precision::FP32 ? 4 + 4 + 8 + 4 + 8 : 4 + 12 + 12 + 2;
}

// The data-parallel reduction of one step (of every stage together) on the rank that holds the
// most parameters (`params`).
double dp_step_time(const Job& job, const layout::Layout& c, const Placement& placement,
                    int64_t params) {
  const PrecisionBytes pb = precision_bytes(job.precision);
  double dp_step = 0;
  // ZeRO 0 all-reduces once per step, ZeRO 1 reduce-scatters once and gathers the updated
  // parameters, ZeRO 2 only gathers (its reduce-scatters run per microbatch: stage_costs.cc), and
  // ZeRO 3 does everything per microbatch.
  if (c.zero == 0) {
    dp_step = collective_time(placement.dp, Collective::AllReduce, params * pb.grad);
  } else if (c.zero <= 2) {
    dp_step =
        (c.zero == 1 ? collective_time(placement.dp, Collective::ReduceScatter, params * pb.grad)
                     : 0) +
        collective_time(placement.dp, Collective::AllGather, params * pb.weight);
  }
  // The tied embedding's gradient, summed by the first and last pipeline ranks over the pp link
  // (an untied LM head has no copy to keep in sync).
  if (c.pp > 1 && job.model.tie_embeddings) {
    GroupLink pair = placement.pp;
    pair.size = 2;
    dp_step += collective_time(
        pair, Collective::AllReduce,
        static_cast<double>(job.model.padded_vocab()) / c.tp * job.model.n_embd * pb.grad);
  }
  return dp_step;
}

// What each instruction of the schedule takes on the cluster: a stage's passes, a pipeline
// message, a stage's data-parallel reduction, the optimizer step.
schedule::Costs instr_costs(const Cluster& cl, const Job& job, const layout::Layout& c,
                            const Placement& placement, const std::vector<StageCost>& stages,
                            const Options& options) {
  schedule::Costs costs;
  costs.stages.resize(stages.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageCost& sc = stages[s];
    PassCost input = sc.recompute;
    input += sc.backward_input;
    costs.stages[s] = {.forward = sc.forward.total(),
                       .backward = sc.backward().total(),
                       .backward_input = input.total(),
                       .backward_weight = sc.backward_weight.total()};
  }
  const PrecisionBytes pb = precision_bytes(job.precision);
  const double message = static_cast<double>(c.micro_batch) * job.seq_len * job.model.n_embd *
                         pb.activation / (c.sequence_parallel ? c.tp : 1);
  costs.p2p = p2p_time(placement.pp, message);
  if (options.pp_scatter_gather && c.tp > 1 && !c.sequence_parallel) {
    costs.p2p = p2p_time(placement.pp, message / c.tp) +
                collective_time(placement.tp, Collective::AllGather, message);
  }

  // The data-parallel reduction, per ReduceGrads (one per stage): the largest rank's share.
  int64_t params = 0;
  for (int r = 0; r < c.pp; ++r) params = std::max(params, local_parameters(job.model, c, r));
  const double dp_chunk = dp_step_time(job, c, placement, params) / c.vp;
  costs.reduce_grads = dp_chunk;
  if (options.overlap_dp && dp_chunk > 0) {  // buckets go out while the last backward runs
    const double layers = static_cast<double>(job.model.n_layer) / (c.pp * c.vp);
    const double backward = stages[c.pp * c.vp / 2].backward().total();
    costs.reduce_grads = exposed_reduction(dp_chunk, backward, layers);
  }
  const double shard = static_cast<double>(params) / (c.zero >= 1 ? c.dp : 1);
  // The calibration's per-step overhead (hardware.h) runs where every rank's step ends.
  costs.optimizer_step =
      optimizer_time(cl, shard * optimizer_bytes_per_param(job.precision)) + cl.step_overhead;
  return costs;
}

// Each rank runs m forwards and backwards of each of its vp stages, their reductions and the
// optimizer step; the busiest one's sum bounds the makespan from below.
double busiest_stream(const layout::Layout& c, int m, const schedule::Costs& costs) {
  double bound = 0;
  for (int r = 0; r < c.pp; ++r) {
    double busy = costs.optimizer_step;
    for (int s = r; s < c.pp * c.vp; s += c.pp) {
      busy += m * (costs.stages[s].forward + costs.stages[s].backward) + costs.reduce_grads;
    }
    bound = std::max(bound, busy);
  }
  return bound;
}

// Where the step's time goes on the busiest rank: what its own stream did, and what it waited
// for. split_pp: simulate again with free messages to tell exposed messages from the bubble.
StepBreakdown break_down(const schedule::Timeline& timeline, const std::vector<StageCost>& stages,
                         const ScheduleCache::Entry& entry, const schedule::Costs& costs,
                         bool split_pp) {
  const int rank = static_cast<int>(std::max_element(timeline.busy.begin(), timeline.busy.end()) -
                                    timeline.busy.begin());
  StepBreakdown t;
  t.total = timeline.makespan;
  for (const schedule::Slot& slot : timeline.ranks[rank]) {
    using schedule::Op;
    const Op op = slot.instr.op;
    if (op == Op::ReduceGrads) t.dp_comm += slot.end - slot.start;
    if (op == Op::OptimizerStep) t.optimizer += slot.end - slot.start;
    if (!schedule::is_compute(op)) continue;
    const StageCost& sc = stages[slot.instr.stage];
    // An I pass is the input-gradient half with the recomputation it needs.
    PassCost pass = op == Op::Forward          ? sc.forward
                    : op == Op::Backward       ? sc.backward()
                    : op == Op::BackwardWeight ? sc.backward_weight
                                               : sc.recompute;
    if (op == Op::BackwardInput) pass += sc.backward_input;
    t.compute += pass.compute;
    t.tp_comm += pass.tp_comm;
    t.dp_comm += pass.dp_comm;
  }
  const double idle = t.total - timeline.busy[rank];
  if (split_pp) {
    schedule::Costs free = costs;
    free.p2p = 0;
    const double ideal = schedule::simulate_checked(entry.schedule, free, entry.buffers).makespan;
    t.pp_comm = std::clamp(t.total - ideal, 0.0, idle);
  }
  t.bubble = std::max(0.0, idle - t.pp_comm);
  return t;
}

}  // namespace

Simulation simulate_config(const Cluster& cl, const Job& job, const layout::Layout& c,
                           const Options& options) {
  Simulation sim;
  Prediction& p = sim.prediction;
  p.config = c;
  Status v = validate(c, job);
  if (compute_peak(cl, job.precision) <= 0) {
    v.add(fmt::format("cluster {} gives no peak rate for {} (its [peak_tflops] lacks {})", cl.name,
                      precision_name(job.precision),
                      job.precision == Precision::FP32 ? "fp32" : "bf16 and fp16"));
  }
  if (!v.ok()) {
    p.feasible = false;
    p.reasons = v.problems();
    return sim;
  }
  const int m = c.microbatches(job.global_batch);
  const schedule::Shape shape{.pp = c.pp, .vp = c.vp, .microbatches = m};
  ScheduleCache local;
  const ScheduleCache::Entry& entry =
      (options.cache ? *options.cache : local).get(c.schedule, shape);
  p.in_flight = entry.in_flight;

  // Memory first: the search skips pricing what cannot fit.
  p.memory =
      peak_memory(job, c, entry.schedule.shape, entry.slots, entry.buffers, cl.runtime_bytes);
  if (p.memory.total() > cl.usable_memory()) {
    p.feasible = false;
    p.reasons.push_back(fmt::format("needs {:.1f} GiB per device, has {:.0f} ({:.1f} usable)",
                                    std::ceil(p.memory.total() / kGiB * 10) / 10,
                                    cl.memory_bytes / kGiB, cl.usable_memory() / kGiB));
    if (!options.time_infeasible) return sim;
  }

  p.placement = place(cl, c);
  const StageCostInputs in{.cluster = &cl,
                           .job = &job,
                           .config = &c,
                           .placement = &p.placement,
                           .overlap_dp = options.overlap_dp};
  sim.stages = stage_costs(in);
  const schedule::Costs costs = instr_costs(cl, job, c, p.placement, sim.stages, options);
  if (options.bound_only) {
    p.time.total = busiest_stream(c, m, costs);
    return sim;
  }
  sim.schedule = entry.schedule;
  p.simulated = true;
  // The trainer's run: its producers wait for their send buffers (schedule/send_buffers.h).
  schedule::Timeline timeline = schedule::simulate_checked(entry.schedule, costs, entry.buffers);
  if (timeline.deadlocked()) {
    p.feasible = false;
    p.reasons.push_back("the schedule deadlocks");
    return sim;
  }
  p.time =
      break_down(timeline, sim.stages, entry, costs, options.detailed && c.pp > 1 && costs.p2p > 0);
  const StepBreakdown& t = p.time;
  if (options.keep_timeline) sim.timeline = std::move(timeline);

  const double tokens = static_cast<double>(job.global_batch) * job.seq_len;
  p.tokens_per_s = tokens / t.total;
  // The FLOPs of the GEMMs the step runs, recomputation counted (PTD-P Eq. 3 with 72, or 96
  // under full recomputation, for GPT-2): what "TFLOP/s per device" is quoted in, as in the
  // PTD-P paper's tables.
  p.tflops_per_device =
      model::training_flops_per_step(job.model, job.global_batch, job.seq_len, c.recompute) /
      (t.total * job.world) / 1e12;
  const double peak = compute_peak(cl, job.precision);
  p.mfu = model::model_flops_per_step(job.model, job.global_batch, job.seq_len) /
          (t.total * job.world * peak);
  if (job.tokens > 0) p.days = job.tokens / p.tokens_per_s / 86400.0;
  return sim;
}

}  // namespace weft::planner
