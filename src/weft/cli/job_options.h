#pragma once
// The options `weft plan` and `weft simulate` share: a model, a cluster and the job's sizes,
// registered, checked and loaded in one place.

#include <string>

#include "weft/planner/config.h"
#include "weft/planner/hardware.h"

namespace CLI {
class App;
}

namespace weft::cli {

struct JobOptions {
  std::string model, cluster = "configs/clusters/dgx-a100.toml";
  int gpus = 0, global_batch = 0, seq = 0;
  double tokens = 0;
  std::string precision = "bf16-mixed";
  bool scatter_gather = false;
};

void add_job_options(CLI::App* cmd, JobOptions& o);

struct LoadedJob {
  planner::Cluster cluster;
  planner::Job job;
};

// Every missing option and invalid input at once (plus `extra` problems the caller found), under
// the heading `command`; then loads the cluster preset and the model.
LoadedJob load_job(const JobOptions& o, const std::string& command, Status extra = {});

}  // namespace weft::cli
