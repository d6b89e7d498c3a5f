#include "weft/planner/memory_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "weft/planner/comm_volume.h"
#include "weft/schedule/schedule.h"

namespace weft::planner {

MemoryBreakdown model_state_bytes(int64_t params, Precision precision, int zero, int dp) {
  const PrecisionBytes pb = precision_bytes(precision);
  const double p = static_cast<double>(params);
  MemoryBreakdown m;
  m.weights = p * pb.weight / (zero >= 3 ? dp : 1);
  m.grads = p * pb.grad / (zero >= 2 ? dp : 1);
  m.optimizer = p * pb.optimizer / (zero >= 1 ? dp : 1);
  return m;
}

double layer_activation_bytes(const Job& job, const ParallelConfig& c) {
  const double s = job.seq_len, b = c.micro_batch, h = job.model.n_embd, a = job.model.n_head;
  const double t = c.tp;
  const double sbh = s * b * h;
  const double scale = precision_bytes(job.precision).activation / 2.0;
  double bytes = 0;
  switch (c.recompute) {
    case model::Recompute::None:
      bytes = c.sequence_parallel ? sbh * (34 + 5 * a * s / h) / t
                                  : sbh * (10 + 24 / t + 5 * a * s / (h * t));
      break;
    case model::Recompute::Selective:
      bytes = c.sequence_parallel ? sbh * 34 / t : sbh * (10 + 24 / t);
      break;
    case model::Recompute::Full:
      bytes = c.sequence_parallel ? 2 * sbh / t : 2 * sbh;
      break;
  }
  return bytes * scale;
}

std::vector<int> in_flight(const ParallelConfig& c, const Job& job) {
  const schedule::Shape shape{.pp = c.pp, .vp = c.vp, .microbatches = c.microbatches(job)};
  return schedule::peak_in_flight(schedule::make_schedule(c.schedule, shape).value_or_throw());
}

MemoryBreakdown peak_memory(const Job& job, const ParallelConfig& c,
                            const std::vector<int>& in_flight, int64_t runtime_bytes) {
  const model::GptConfig& m = job.model;
  const double e = precision_bytes(job.precision).activation;
  const double b = c.micro_batch, s = job.seq_len, h = m.n_embd, t = c.tp;
  const double layers_per_stage = static_cast<double>(m.n_layer) / (c.pp * c.vp);
  const double per_layer = layer_activation_bytes(job, c);
  // The full layer's activations exist while one layer is recomputed or back-propagated.
  ParallelConfig kept = c;
  kept.recompute = model::Recompute::None;
  const double working_layer =
      c.recompute == model::Recompute::None ? 0 : layer_activation_bytes(job, kept);
  MemoryBreakdown best;
  if (job.precision == Precision::FP32) {
    for (int r = 0; r < c.pp; ++r) {
      const model::MemoryEstimate w = weft_rank_memory(job, c, r, 1, runtime_bytes);
      MemoryBreakdown mem;
      mem.weights = static_cast<double>(w.params);
      mem.grads = static_cast<double>(w.grads);
      mem.optimizer = static_cast<double>(w.optimizer);
      mem.activations = static_cast<double>(w.activations);
      mem.buffers = static_cast<double>(w.workspace + w.runtime);
      if (mem.total() > best.total()) best = mem;
    }
    return best;
  }
  for (int r = 0; r < c.pp; ++r) {
    MemoryBreakdown mem = model_state_bytes(local_parameters(m, c, r), job.precision, c.zero, c.dp);
    mem.activations = in_flight[r] * layers_per_stage * per_layer;
    // Messages in and out (two of each kind), gradient of the residual stream.
    mem.buffers = working_layer + 4 * b * s * h * e / (c.sequence_parallel ? t : 1);
    if (r == 0) mem.activations += in_flight[r] * b * s * h * e / c.vp;  // embedding output
    if (r == c.pp - 1) {
      // Logits of one microbatch in fp32 and their gradient (Vp/t columns each).
      mem.buffers += 2 * b * s * m.padded_vocab() / t * 4;
    }
    if (c.zero >= 3) {
      // ZeRO-3 gathers one layer's full weights at a time (and its gradient before scattering).
      mem.buffers += 2 * 12 * h * h / t * precision_bytes(job.precision).weight;
    }
    if (mem.total() > best.total()) best = mem;
  }
  return best;
}

model::MemoryEstimate weft_rank_memory(const Job& job, const ParallelConfig& c, int pp_rank,
                                       int threads, int64_t runtime_bytes) {
  const schedule::Shape shape{.pp = c.pp, .vp = c.vp, .microbatches = c.microbatches(job)};
  const schedule::Schedule s =
      schedule::make_schedule(c.schedule, shape)
          .value_or_throw("weft_rank_memory: the schedule does not fit the configuration");
  const std::vector<int> slots = schedule::peak_in_flight_per_chunk(s, pp_rank);
  std::vector<model::ChunkMemory> chunks;
  for (int j = 0; j < c.vp; ++j) {
    const int stage = pp_rank + j * c.pp;
    chunks.push_back({model::pipeline_stage(job.model, stage, shape.num_stages()),
                      std::max(1, slots[j]), stage > 0 && shape.rank_of(stage - 1) != pp_rank});
  }
  return model::estimate_rank_memory(job.model, c.micro_batch, job.seq_len, c.recompute, threads,
                                     {c.tp, c.sequence_parallel}, chunks, shape.microbatches,
                                     c.pp > 1, c.schedule == schedule::Kind::ZeroBubbleH1,
                                     {c.zero, c.dp}, runtime_bytes);
}

std::string format_bytes(double bytes) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  if (bytes >= kGiB) return fmt::format("{:.1f} GiB", bytes / kGiB);
  return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
}

}  // namespace weft::planner
