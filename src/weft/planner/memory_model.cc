#include "weft/planner/memory_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "weft/schedule/schedule.h"

namespace weft::planner {
namespace {

schedule::Schedule make(const Job& job, const ParallelConfig& c) {
  const schedule::Shape shape{.pp = c.pp, .vp = c.vp, .microbatches = c.microbatches(job)};
  return schedule::make_schedule(c.schedule, shape)
      .value_or_throw("the planner's memory: the schedule does not fit the configuration");
}

// Rank `pp_rank`'s estimate, given its chunks' activation slots (peak_in_flight_per_chunk).
model::MemoryEstimate rank_memory(const Job& job, const ParallelConfig& c,
                                  const schedule::Shape& shape, const std::vector<int>& slots,
                                  int pp_rank, int threads, int64_t runtime_bytes) {
  std::vector<model::ChunkMemory> chunks;
  for (int j = 0; j < c.vp; ++j) {
    const int stage = shape.stage_of(pp_rank, j);
    chunks.push_back({model::pipeline_stage(job.model, stage, shape.num_stages()),
                      std::max(1, slots[j]), stage > 0 && shape.rank_of(stage - 1) != pp_rank});
  }
  return model::estimate_rank_memory(job.model, c.micro_batch, job.seq_len, c.recompute, threads,
                                     {c.tp, c.sequence_parallel}, chunks, shape.microbatches,
                                     c.pp > 1, c.schedule == schedule::Kind::ZeroBubbleH1,
                                     {c.zero, c.dp}, runtime_bytes, model_precision(job.precision));
}

}  // namespace

model::Precision model_precision(Precision p) {
  switch (p) {
    case Precision::FP32:
      return model::Precision::FP32;
    case Precision::BF16Mixed:
      return model::Precision::BF16Mixed;
  }
  return model::Precision::FP32;
}

MemoryBreakdown peak_memory(const Job& job, const ParallelConfig& c,
                            const schedule::Schedule& schedule, int64_t runtime_bytes) {
  return peak_memory(job, c, schedule.shape, schedule::peak_in_flight_per_chunk(schedule),
                     runtime_bytes);
}

MemoryBreakdown peak_memory(const Job& job, const ParallelConfig& c, const schedule::Shape& shape,
                            const std::vector<std::vector<int>>& slots, int64_t runtime_bytes) {
  MemoryBreakdown best;
  for (int r = 0; r < c.pp; ++r) {
    const model::MemoryEstimate w = rank_memory(job, c, shape, slots[r], r, 1, runtime_bytes);
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

MemoryBreakdown peak_memory(const Job& job, const ParallelConfig& c, int64_t runtime_bytes) {
  return peak_memory(job, c, make(job, c), runtime_bytes);
}

model::MemoryEstimate weft_rank_memory(const Job& job, const ParallelConfig& c,
                                       const schedule::Schedule& s, int pp_rank, int threads,
                                       int64_t runtime_bytes) {
  return rank_memory(job, c, s.shape, schedule::peak_in_flight_per_chunk(s, pp_rank), pp_rank,
                     threads, runtime_bytes);
}

model::MemoryEstimate weft_rank_memory(const Job& job, const ParallelConfig& c, int pp_rank,
                                       int threads, int64_t runtime_bytes) {
  return weft_rank_memory(job, c, make(job, c), pp_rank, threads, runtime_bytes);
}

std::string format_bytes(double bytes) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  if (bytes >= kGiB) return fmt::format("{:.1f} GiB", bytes / kGiB);
  return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
}

}  // namespace weft::planner
