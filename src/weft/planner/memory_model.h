#pragma once
// Memory per device of one configuration (docs/planner.md §5): the busiest pipeline rank of the
// trainer that runs the job's precision, as model::estimate_rank_memory (the one memory model,
// model/memory.h) says that trainer allocates: fp32 is the host engine's layout, with ZeRO,
// sequence parallelism and every schedule; bf16-mixed the device engine's (model::Gpt's buffers
// on a bf16 backend, the AdamW moments, its send buffers; sequence parallelism, every schedule and
// ZeRO), which is what runtime::device_bytes predicts and its backend allocates, exactly.

#include <cstdint>
#include <string>

#include "weft/model/memory.h"
#include "weft/planner/config.h"
#include "weft/schedule/instr.h"
#include "weft/schedule/simulate.h"

namespace weft::planner {

// `snapshot`: an asynchronous checkpoint's copy of the state (Job::checkpoint_snapshot).
struct MemoryBreakdown {
  double weights = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;  // bytes
  double snapshot = 0;
  double total() const { return weights + grads + optimizer + activations + buffers + snapshot; }
};

// The device that needs the most: the largest weft_rank_memory over the pipeline ranks, with
// `buffers` its workspace and runtime. `schedule`: the configuration's (compute only or lowered),
// whose peaks of microbatches in flight size each rank's slot pools and whose send buffers
// (schedule::send_buffers) each rank keeps (layout/rank.h). `runtime_bytes`: the cluster preset's
// (Cluster::runtime_bytes), for the host engine (fp32).
MemoryBreakdown peak_memory(const Job& job, const layout::Layout& c,
                            const schedule::Schedule& schedule,
                            int64_t runtime_bytes = model::kDefaultRuntimeBytes);
// The same from that schedule's layout::pool_slots (per rank, per slot pool) and
// schedule::send_buffers (per rank).
MemoryBreakdown peak_memory(const Job& job, const layout::Layout& c, const schedule::Shape& shape,
                            const std::vector<std::vector<int>>& slots,
                            const std::vector<schedule::SendBuffers>& buffers,
                            int64_t runtime_bytes = model::kDefaultRuntimeBytes);
// The same, making the configuration's schedule.
MemoryBreakdown peak_memory(const Job& job, const layout::Layout& c,
                            int64_t runtime_bytes = model::kDefaultRuntimeBytes);
// The host memory the busiest rank keeps for asynchronous checkpoints (model::snapshot_bytes),
// whatever the precision; 0 unless job.checkpoint_snapshot. For a device's job, which
// peak_memory prices in the device's memory, this is what its host must hold per rank.
double snapshot_memory(const Job& job, const layout::Layout& c);

// Exactly what pipeline rank `pp_rank` of weft's trainer for the job's precision allocates
// (model::estimate_rank_memory over the chunks and activation slots of its schedule program):
// what `weft bench step` measures against (fp32), and what the device trainer allocates (bf16).
model::MemoryEstimate weft_rank_memory(const Job& job, const layout::Layout& c, int pp_rank,
                                       int threads = 1,
                                       int64_t runtime_bytes = model::kDefaultRuntimeBytes);

std::string format_bytes(double bytes);  // "80.0 GiB"

}  // namespace weft::planner
