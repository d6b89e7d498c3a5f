#pragma once
// parallel.auto (docs/training.md): the layout a run takes on the ranks it was started with when
// its own [parallel] layout is for another number of ranks, e.g. after nodes were lost. The search
// (search.h) over the layouts of job.world ranks, restricted to what must not change in a run:
// the job keeps its model, global batch, sequence length and precision, and the layout keeps the
// run's microbatch size (it also sizes the validation batches, so another would change val_loss)
// and recomputation. Everything else (tp, pp, dp, vp, schedule, ZeRO stage, sequence
// parallelism) is the fastest the planner predicts that the trainer accepts (layout::validate)
// and that fits in the cluster's memory. Pure: no MPI, no files; the caller picks the preset.

#include "weft/core/status.h"
#include "weft/planner/search.h"

namespace weft::planner {

// The space parallel.auto searches for a run whose layout is `run`: every axis of SearchSpace{}
// but the microbatch size and the recomputation, which stay the run's.
SearchSpace auto_layout_space(const layout::Layout& run);

// The fastest layout (its prediction) of `job` on job.world devices of `cluster` in
// auto_layout_space(run). When none can run: an error with a problem for each process grid
// (tp, pp, dp) that was tried, why its closest candidate cannot run (the fewest reasons, then the
// least memory) in the run config's terms, and a last one saying what to change.
Result<Prediction> auto_layout(const Cluster& cluster, const Job& job, const layout::Layout& run);

}  // namespace weft::planner
