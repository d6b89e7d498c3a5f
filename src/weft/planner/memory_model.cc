#include "weft/planner/memory_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "weft/layout/rank.h"
#include "weft/planner/hardware.h"
#include "weft/schedule/schedule.h"
#include "weft/schedule/send_buffers.h"

namespace weft::planner {
namespace {

schedule::Schedule make(const Job& job, const layout::Layout& c) {
  const schedule::Shape shape{
      .pp = c.pp, .vp = c.vp, .microbatches = c.microbatches(job.global_batch)};
  return schedule::make_schedule(c.schedule, shape)
      .value_or_throw("the planner's memory: the schedule does not fit the configuration");
}

// Rank `pp_rank`'s estimate, given its slot pools' slots (layout::pool_slots) and its send
// buffers.
model::MemoryEstimate rank_memory(const Job& job, const layout::Layout& c,
                                  const schedule::Shape& shape, const std::vector<int>& slots,
                                  schedule::SendBuffers buffers, int pp_rank, int threads,
                                  int64_t runtime_bytes) {
  return model::estimate_rank_memory(
      job.model, layout::rank_shape(c, job.seq_len, pp_rank),
      layout::rank_program(job.model, c.schedule, shape, pp_rank, slots, buffers),
      {.precision = job.precision,
       .threads = threads,
       .runtime_bytes = runtime_bytes,
       .snapshot = job.checkpoint_snapshot});
}

}  // namespace

MemoryBreakdown peak_memory(const Job& job, const layout::Layout& c,
                            const schedule::Schedule& schedule, int64_t runtime_bytes) {
  return peak_memory(job, c, schedule.shape, layout::pool_slots(schedule),
                     schedule::send_buffers(schedule), runtime_bytes);
}

MemoryBreakdown peak_memory(const Job& job, const layout::Layout& c, const schedule::Shape& shape,
                            const std::vector<std::vector<int>>& slots,
                            const std::vector<schedule::SendBuffers>& buffers,
                            int64_t runtime_bytes) {
  MemoryBreakdown best;
  for (int r = 0; r < c.pp; ++r) {
    const model::MemoryEstimate w =
        rank_memory(job, c, shape, slots[r], buffers.at(r), r, 1, runtime_bytes);
    MemoryBreakdown mem;
    mem.weights = static_cast<double>(w.params);
    mem.grads = static_cast<double>(w.grads);
    mem.optimizer = static_cast<double>(w.optimizer);
    mem.activations = static_cast<double>(w.activations);
    mem.buffers = static_cast<double>(w.workspace + w.runtime);
    mem.snapshot = static_cast<double>(w.snapshot);
    if (mem.total() > best.total()) best = mem;
  }
  return best;
}

MemoryBreakdown peak_memory(const Job& job, const layout::Layout& c, int64_t runtime_bytes) {
  return peak_memory(job, c, make(job, c), runtime_bytes);
}

double snapshot_memory(const Job& job, const layout::Layout& c) {
  if (!job.checkpoint_snapshot) return 0;
  const schedule::Schedule s = make(job, c);
  int64_t most = 0;
  for (int r = 0; r < c.pp; ++r) {
    most = std::max(most, model::snapshot_bytes(job.model, layout::rank_shape(c, job.seq_len, r),
                                                layout::rank_program(job.model, s, r)));
  }
  return static_cast<double>(most);
}

model::MemoryEstimate weft_rank_memory(const Job& job, const layout::Layout& c, int pp_rank,
                                       int threads, int64_t runtime_bytes) {
  const schedule::Schedule s = make(job, c);
  return rank_memory(job, c, s.shape, layout::pool_slots(s).at(pp_rank),
                     schedule::send_buffers(s).at(pp_rank), pp_rank, threads, runtime_bytes);
}

std::string format_bytes(double bytes) {
  if (bytes >= kGiB) return fmt::format("{:.1f} GiB", bytes / kGiB);
  return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
}

}  // namespace weft::planner
