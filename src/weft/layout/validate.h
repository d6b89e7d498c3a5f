#pragma once
// The one rule book of parallel layouts (issue #19, "one truth for feasibility"): can weft
// train a GPT under a layout (tp, pp, dp, vp, sequence parallelism, ZeRO stage, schedule,
// recomputation, microbatching)? The trainer's validation (config::validate, validate_layout in
// config/run_config.h) and the planner's (planner::validate in planner/config.h, so every
// configuration its search ranks) both call validate() below and have no layout rule of their
// own, so `weft plan` never recommends a layout `weft train` refuses.
//
// It is a module of its own because both sides need it and neither may hold it: the planner links
// without the runtime (DESIGN.md §2), and the rules need the schedule's shape check, which
// model_config may not include. Its edges: schedule, model_config <- layout <- planner, runtime.
//
// There is one engine (model::Gpt, the pipeline runtime, optim::DistributedOptimizer on any
// kernels::Backend), so there is one rule book for every device and precision: no layout is
// refused for where it runs.

#include "weft/core/status.h"
#include "weft/layout/layout.h"
#include "weft/model/gpt_config.h"

namespace weft::layout {

// What a layout splits besides the model: a step's global batch and the sequence length.
struct Batch {
  int global_batch = 1;  // B, sequences per step over every replica
  int seq_len = 0;       // T (0: unknown; the sequence-parallel split of b*T is then not checked)
};

// Every reason weft cannot train `model` under `layout`, together, in the run config's own terms
// ("n_head=96 is not divisible by tp=5 ..."), so a planner's reason reads as the key a RUN.toml
// would set. The world size is not a layout rule (parallel::validate checks tp*pp*dp against it);
// memory is not either (the planner's verdict and the trainer's launch gate).
Status validate(const model::GptConfig& model, const Layout& layout, const Batch& batch);

}  // namespace weft::layout
