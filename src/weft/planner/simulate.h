#pragma once
// One configuration, priced end to end (docs/planner.md §6): build the schedule the runtime runs
// (schedule::make_schedule, add_communication, add_optimizer_step), price every stage with the
// cost model, time it with schedule::simulate, take the in-flight microbatches from
// schedule::peak_in_flight, and derive the step time's breakdown, memory, throughput and MFU.

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "weft/planner/config.h"
#include "weft/planner/cost_model.h"
#include "weft/planner/hardware.h"
#include "weft/planner/memory_model.h"
#include "weft/planner/stage_costs.h"
#include "weft/schedule/instr.h"
#include "weft/schedule/simulate.h"

namespace weft::planner {

// Where a step's time goes on its busiest pipeline rank; the parts add up to `total`.
struct StepBreakdown {
  double compute = 0;    // GEMMs and memory-bound kernels (recomputation included)
  double bubble = 0;     // pipeline idle time not caused by messages
  double tp_comm = 0;    // tensor-parallel collectives
  double pp_comm = 0;    // exposed pipeline messages (makespan minus the free-message makespan)
  double dp_comm = 0;    // exposed data-parallel reduction (and ZeRO gathers)
  double optimizer = 0;  // the optimizer step
  double total = 0;      // the simulated makespan
};

struct Prediction {
  layout::Layout config;
  bool feasible = true;
  std::vector<std::string> reasons;  // why not, in the user's terms
  StepBreakdown time;
  MemoryBreakdown memory;      // of the device that needs the most
  std::vector<int> in_flight;  // per pipeline rank
  double tokens_per_s = 0;
  double tflops_per_device = 0;  // hardware FLOPs (recomputation counted, PTD-P Eq. 3 style)
  double mfu = 0;                // model FLOPs (no recomputation) / (time * spec peak)
  double days = 0;               // to train on job.tokens (0 when not asked)
  Placement placement;
  bool simulated = false;  // false: time.total is only Options::bound_only's lower bound
};

// Built schedules and their in-flight counts, keyed by (kind, pp, vp, microbatches): a search
// prices many configurations that share one schedule.
class ScheduleCache {
 public:
  struct Entry {
    schedule::Schedule schedule;                 // lowered, with the step's end
    std::vector<int> in_flight;                  // schedule::peak_in_flight per pipeline rank
    std::vector<std::vector<int>> slots;         // layout::pool_slots: per rank, per slot pool
    std::vector<schedule::SendBuffers> buffers;  // schedule::send_buffers per rank
  };
  const Entry& get(schedule::Kind kind, const schedule::Shape& shape);

 private:
  std::map<std::tuple<int, int, int, int>, Entry> entries_;
};

struct Options {
  // The data-parallel reduction of a stage overlaps its last backward (gradient buckets start as
  // soon as they are complete): only what is left after that backward is exposed.
  bool overlap_dp = true;
  // Megatron-LM's scatter/gather of pipeline messages (Narayanan et al. §4.1): each of the t
  // ranks of a tp group sends 1/t of the (replicated) activation across nodes and the receivers
  // all-gather it over the node link. weft's runtime sends the whole activation (off); with
  // sequence parallelism the activation is already split and this changes nothing.
  bool pp_scatter_gather = false;
  // Also simulate with free messages to split the pipeline's idle time into bubble and exposed
  // p2p (twice the simulation work; the search asks for it only for the rows it prints).
  bool detailed = true;
  // Keep the timeline (for the trace and the SVG).
  bool keep_timeline = false;
  // Price the step of a configuration that does not fit in memory too (the search skips it).
  bool time_infeasible = true;
  ScheduleCache* cache = nullptr;  // optional
  // Price the stages but do not simulate: time.total is then the busiest rank's stream time
  // (its work without any waiting), a lower bound on the step time (the search's bound).
  bool bound_only = false;
};

struct Simulation {
  Prediction prediction;
  schedule::Schedule schedule;  // lowered, with the step's end
  schedule::Timeline timeline;  // when Options::keep_timeline
  std::vector<StageCost> stages;
};

// Everything about one configuration; an invalid one (validate(c, job)) comes back infeasible
// with the reasons, a valid one that does not fit in memory with "needs X GiB per device, has Y".
Simulation simulate_config(const Cluster& cluster, const Job& job, const layout::Layout& c,
                           const Options& options = {});
inline Prediction predict(const Cluster& cluster, const Job& job, const layout::Layout& c,
                          const Options& options = {}) {
  return simulate_config(cluster, job, c, options).prediction;
}

}  // namespace weft::planner
