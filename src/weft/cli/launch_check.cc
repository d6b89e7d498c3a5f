#include "weft/cli/launch_check.h"

#include <fmt/core.h>

#include <string>

#include "weft/core/memory_usage.h"
#include "weft/data/token_scan.h"
#include "weft/planner/memory_model.h"
#include "weft/schedule/schedule.h"

namespace weft::cli {

planner::Job planned_job(const config::RunConfig& cfg, int world, Precision precision) {
  return {.model = cfg.model,
          .seq_len = cfg.train.seq_len,
          .global_batch = cfg.train.global_batch,
          .world = world,
          .precision = precision,
          .checkpoint_snapshot = cfg.keeps_snapshot()};
}

Result<PlannedRun> planned_run(const config::RunConfig& cfg, int world, Precision precision) {
  using namespace planner;
  PlannedRun r{planned_job(cfg, world, precision), cfg.parallel};
  Status s = validate(r.job);
  if (s.ok()) s.merge(validate(r.config, r.job));
  if (!s.ok()) return s;
  return r;
}

double least_available_memory(comm::Communicator* world) {
  double available = static_cast<double>(available_memory_bytes());
  if (world != nullptr && world->size() > 1) {
    double least = -available;  // the least of them, as the largest negation
    world->all_reduce(&least, 1, comm::ReduceOp::Max);
    available = -least;
  }
  return available;
}

Status check_host_memory(const PlannedRun& run, int local, const std::string& what,
                         comm::Communicator* world) {
  using namespace planner;
  const double available = least_available_memory(world);
  if (available <= 0) return {};  // nothing to compare with: the launch goes ahead
  const double each = available / local;
  if (run.job.precision != Precision::FP32) {  // a device's run: on the host, its snapshots
    const double snapshot = snapshot_memory(run.job, run.config);
    if (snapshot <= each) return {};
    return Status::error(fmt::format(
        "{} does not fit in this machine's memory: each process keeps a copy of its training "
        "state in host memory for checkpoints in the background, {} for the busiest; the "
        "machine has {} available, {} for each of its {} processes. Set "
        "train.async_checkpoint=false (training then waits for each save), or use more "
        "processes per model (ZeRO, tensor or pipeline parallelism).",
        what, format_bytes(snapshot), format_bytes(available), format_bytes(each), local));
  }
  const MemoryBreakdown m = peak_memory(run.job, run.config);
  if (m.total() <= each) return {};
  return Status::error(fmt::format(
      "{} does not fit in this machine's memory: the busiest process needs {} = weights {} + "
      "grads {} + optimizer {} + activations {} + buffers {}{} (the planner's breakdown, as "
      "`weft plan --check` prints it); the machine has {} available, {} for each of its {} "
      "processes. Choose a smaller model or micro_batch, more pipeline or tensor parallelism, "
      "ZeRO, or recomputation{}.",
      what, format_bytes(m.total()), format_bytes(m.weights), format_bytes(m.grads),
      format_bytes(m.optimizer), format_bytes(m.activations), format_bytes(m.buffers),
      m.snapshot > 0 ? fmt::format(" + checkpoint snapshot {}", format_bytes(m.snapshot)) : "",
      format_bytes(available), format_bytes(each), local,
      m.snapshot > 0 ? ", or set train.async_checkpoint=false" : ""));
}

Status check_dataset_ids(const config::RunConfig& cfg, const data::TokenDataset& dataset,
                         comm::Communicator* world) {
  if (dataset.ids_recorded()) return {};
  const bool leader = world == nullptr || world->rank() == 0;
  int64_t range[3] = {0, -1, 0};  // min, max, tokens
  if (leader) {
    const data::CachedScan scan = data::scan_token_ids_cached(dataset, cfg.run.out_dir);
    range[0] = scan.range.min;
    range[1] = scan.range.max;
    range[2] = scan.range.tokens;
    if (!scan.cached) {
      fmt::print(stderr,
                 "weft: {} has no sidecar: scanned its {} token ids in {:.2f} s ({:.0f} M "
                 "tokens/s): {} .. {}{}\n",
                 cfg.data.train, scan.range.tokens, scan.seconds,
                 scan.seconds > 0 ? scan.range.tokens / scan.seconds / 1e6 : 0.0, scan.range.min,
                 scan.range.max,
                 scan.cache_path.empty() ? "" : "; verdict cached in " + scan.cache_path);
    }
  }
  if (world != nullptr && world->size() > 1) world->broadcast(range, 3, 0);
  return data::check_token_ids({range[0], range[1], range[2]}, cfg.data.train,
                               cfg.model.vocab_size);
}

}  // namespace weft::cli
