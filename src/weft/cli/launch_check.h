#pragma once
// What `weft train` and `weft bench step` check before they allocate: the planner's view of the
// run (the job and layout `weft plan --check` prices) and whether its busiest process fits in the
// memory this machine has for each of its processes. A run that cannot fit is one error with the
// planner's breakdown, never a std::bad_alloc or the kernel's OOM killer mid-run.

#include <string>

#include "weft/comm/communicator.h"
#include "weft/config/run_config.h"
#include "weft/core/status.h"
#include "weft/data/token_dataset.h"
#include "weft/planner/config.h"

namespace weft::cli {

struct PlannedRun {
  planner::Job job;
  layout::Layout config;
};

// RUN.toml's model, sequence length and global batch as the planner's job on `world` processes of
// weft's trainer in `precision`.
planner::Job planned_job(const config::RunConfig& cfg, int world, Precision precision);

// RUN.toml's model, sequence length, global batch and [parallel] keys as the planner sees them, on
// `world` processes of weft's trainer in `precision` (FP32: the CPU's; BF16Mixed: a device's);
// every problem of the layout at once.
Result<PlannedRun> planned_run(const config::RunConfig& cfg, int world,
                               Precision precision = Precision::FP32);

// The memory (bytes) this process could still allocate (core/memory_usage.h); with `world`, the
// least any of its ranks sees (a collective), so that every rank decides on the same figure. <= 0
// when it cannot be read.
double least_available_memory(comm::Communicator* world);

// An error naming the breakdown when the busiest process of `run` (planner::peak_memory: for
// weft's trainer, exactly what model::estimate_rank_memory says the runner allocates) needs more
// than this node's available memory (core/memory_usage.h) divided among its `local` processes
// (core/node.h: local_processes). A device's run (job.precision BF16Mixed) keeps its state in the
// device's memory, checked as its arena is made: here only its checkpoint snapshots count
// (planner::snapshot_memory).
// With `world`, the ranks first agree on the least memory any of them sees (a collective), so
// every rank reaches the same verdict. `what` names the run in the message.
Status check_host_memory(const PlannedRun& run, int local, const std::string& what,
                         comm::Communicator* world);

// The ids of a dataset nothing records the vocabulary of (no sidecar: Megatron files made by other
// tools, llm.c files) against the model's vocabulary: scanned once by rank 0 (data/token_scan.h,
// the verdict cached beside the data) and broadcast, so that an id beyond the vocabulary stops the
// run now, not at the step that first samples it. Every rank reaches the same verdict.
Status check_dataset_ids(const config::RunConfig& cfg, const data::TokenDataset& dataset,
                         comm::Communicator* world);

}  // namespace weft::cli
