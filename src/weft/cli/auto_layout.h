#pragma once
// parallel.auto of `weft train` (docs/training.md, "Running on a flaky cluster"): a run started
// on another number of ranks than its [parallel] layout takes (nodes were lost, or a fresh run
// gives no layout) takes the planner's fastest layout for the ranks it has instead
// (planner/auto_layout.h), before anything is allocated; a resume then reshards the checkpoint
// into it on load. The rule, when the run config also gives tp, pp and dp: they win when
// tp*pp*dp is the number of ranks started; otherwise parallel.auto overrides them (and all of
// [parallel]: vp, schedule, zero, sequence_parallel) and says so.

#include <string>

#include "weft/comm/communicator.h"
#include "weft/config/run_config.h"

namespace weft::cli {

// The preset parallel.auto prices layouts with unless `weft train --cluster` names another.
inline constexpr const char* kAutoLayoutCluster = "configs/clusters/this-machine.toml";

// With cfg.auto_layout and a layout for another number of ranks than `world_size`: cfg.parallel
// becomes the fastest layout for them on the cluster preset `cluster_path`, in the precision of
// `device` (cli/device.h), and rank 0 prints the choice with its predicted step time and memory.
// A device's memory is the preset's; the CPU engine's is the host's, as the launch gate sees it
// (the least any rank has available, shared by the processes of its node). Rank 0 chooses and
// broadcasts (a collective), so every rank takes the same layout. Throws weft::Error on every rank
// when no layout runs (rank 0's message says why, for each process grid).
void apply_parallel_auto(config::RunConfig& cfg, int world_size, const std::string& device,
                         const std::string& cluster_path, comm::Communicator* world);

}  // namespace weft::cli
