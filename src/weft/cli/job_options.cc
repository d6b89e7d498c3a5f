#include "weft/cli/job_options.h"

#include <CLI/CLI.hpp>

#include "weft/model/gpt_config.h"

namespace weft::cli {

void add_job_options(CLI::App* cmd, JobOptions& o) {
  cmd->add_option("--model", o.model, "model config TOML (configs/models/*.toml)");
  cmd->add_option("--cluster", o.cluster, "cluster preset TOML (configs/clusters/*.toml)")
      ->capture_default_str();
  cmd->add_option("--gpus", o.gpus, "devices to use");
  cmd->add_option("--global-batch", o.global_batch, "sequences per optimizer step");
  cmd->add_option("--seq", o.seq, "sequence length (default: the model's max_seq_len)");
  cmd->add_option("--tokens", o.tokens, "tokens to train on, for the days to train");
  cmd->add_option("--precision", o.precision, "bf16-mixed | fp32")->capture_default_str();
  cmd->add_flag("--scatter-gather", o.scatter_gather,
                "model Megatron's pipeline scatter/gather (1/t of each message across nodes)");
}

LoadedJob load_job(const JobOptions& o, const std::string& command, Status extra) {
  using namespace planner;
  Status s;
  if (o.model.empty()) s.add("--model is required");
  if (o.gpus <= 0) s.add("--gpus is required (> 0)");
  if (o.global_batch <= 0) s.add("--global-batch is required (> 0)");
  s.merge(extra);
  s.throw_if_error(command);
  LoadedJob l{load_cluster(o.cluster).value_or_throw("invalid cluster preset"), Job{}};
  Job& job = l.job;
  job.model = model::load_gpt_config(o.model).value_or_throw("invalid model config");
  job.seq_len = o.seq > 0 ? o.seq : job.model.max_seq_len;
  job.global_batch = o.global_batch;
  job.world = o.gpus;
  job.tokens = o.tokens;
  job.precision = parse_precision(o.precision).value_or_throw("--precision");
  validate(job).throw_if_error("invalid job");
  return l;
}

}  // namespace weft::cli
