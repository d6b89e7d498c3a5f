#pragma once
// The one rule book of parallel layouts (issue #19, "one truth for feasibility"): can an engine
// train a GPT under a layout (tp, pp, dp, vp, sequence parallelism, ZeRO stage, schedule,
// recomputation, microbatching)? The trainer's validation (runtime::validate, validate_layout in
// runtime/run_config.h) and the planner's (planner::validate in planner/config.h, so every
// configuration its search ranks) both call validate() below and have no layout rule of their
// own, so `weft plan` never recommends a layout `weft train` refuses.
//
// It is a module of its own because both sides need it and neither may hold it: the planner links
// without the runtime (DESIGN.md §2), and the rules need the schedule's shape check, which
// model_config may not include. Its edges: schedule, model_config <- layout <- planner, runtime.
//
// What each engine runs today is said once, in support(): when the device engine gains ZeRO,
// sequence parallelism or zb-h1, that table changes and nothing else.

#include <optional>
#include <string_view>

#include "weft/core/status.h"
#include "weft/model/gpt_config.h"
#include "weft/model/recompute.h"
#include "weft/schedule/instr.h"

namespace weft::layout {

// The two engines that train today (the planner's number formats map onto them one to one:
// fp32 is the host engine's, bf16-mixed the device engine's).
enum class Engine {
  Host,  // model::Gpt, PipelineRunner, optim::DistributedOptimizer: fp32 on the CPU (--device cpu)
  Device,  // model::Gpt on a bf16 backend, DeviceTrainer (--device cuda | host-bf16)
};
std::string_view engine_name(Engine e);  // "the device engine (bf16: --device cuda, host-bf16)"

// What an engine can run beyond the rules every engine shares (divisibility, schedule shapes).
struct Support {
  bool sequence_parallel = true;
  int max_zero = 3;         // the highest ZeRO stage it shards with
  bool zb_h1 = true;        // the split-backward schedule
  bool lone_chunks = true;  // vp > 1 model chunks on a rank of a pipeline of one (pp = 1)
};
Support support(Engine e);

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  int vp = 1;  // model chunks per pipeline rank
  bool sequence_parallel = false;
  int zero = 0;  // ZeRO stage over the dp group
  // nullopt: a name the caller could not parse (and reported); the schedule's checks are skipped.
  std::optional<schedule::Kind> schedule = schedule::Kind::OneFOneB;
  model::Recompute recompute = model::Recompute::None;
  int micro_batch = 1;   // b, sequences per microbatch
  int global_batch = 1;  // B, sequences per step over every replica
  int seq_len = 0;       // T (0: unknown; the sequence-parallel split of b*T is then not checked)
};

// Every reason `engine` cannot train `model` under `layout`, together, in the run config's own
// terms ("n_head=96 is not divisible by tp=5 ...", "parallel.zero=2: the device engine ... keeps
// whole replicas"), so a planner's reason reads as the key a RUN.toml would set. The world size is
// not a layout rule (parallel::validate checks tp*pp*dp against it); memory is not either (the
// planner's verdict and the trainer's launch gate).
Status validate(const model::GptConfig& model, const Layout& layout, Engine engine);

}  // namespace weft::layout
