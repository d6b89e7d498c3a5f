#pragma once
// What the planner is asked about: a training job (model, sequence length, global batch, world,
// number formats) and one layout of it (layout::Layout: tp, pp, dp, vp, microbatch size,
// schedule, recomputation, sequence parallelism, ZeRO stage, the trainer's own type). Both
// validated with every problem listed in the user's terms.

#include <string>
#include <string_view>

#include "weft/core/dtype.h"
#include "weft/core/status.h"
#include "weft/layout/layout.h"
#include "weft/layout/validate.h"
#include "weft/model/gpt_config.h"

namespace weft::planner {

// How parameters, gradients, optimizer state and activations are stored (docs/planner.md §5).
//   fp32        weft's CPU trainer: fp32 weights (4), gradients (4), two Adam moments (8):
//               16 bytes per parameter; activations and messages fp32.
//   bf16-mixed  Megatron-LM's mixed precision: bf16 weights (2), fp32 main gradients (4), fp32
//               master weights + Adam m + v (12): 18 bytes per parameter; activations bf16.
using weft::Precision;  // core/dtype.h: the one precision policy
std::string_view precision_name(Precision p);
Result<Precision> parse_precision(std::string_view name);

struct PrecisionBytes {
  int weight = 4;      // per parameter, the copy forward/backward read
  int grad = 4;        // per parameter, the gradient buffer (and the dp reduction's element)
  int optimizer = 8;   // per parameter: master copy (if any) + Adam's two moments
  int activation = 4;  // per activation element (and per pipeline/tp message element)
};
PrecisionBytes precision_bytes(Precision p);

struct Job {
  model::GptConfig model;
  int seq_len = 0;       // s
  int global_batch = 0;  // B, sequences per step
  int world = 0;         // devices
  Precision precision = Precision::BF16Mixed;
  double tokens = 0;  // tokens to train on (0: no time-to-train)
  // The trainer keeps a snapshot of each rank's state for asynchronous checkpoints
  // (RunConfig::keeps_snapshot; model::MemoryCounting::snapshot).
  bool checkpoint_snapshot = false;
};

Status validate(const Job& job);

// Every reason this configuration cannot run the job at all, independent of memory: the trainer's
// own layout rules (layout::validate, the same for every device and precision: divisibility,
// schedule shape, "n_head=96 is not divisible by tp=5 ...") and tp*pp*dp against the world. Memory
// is the planner's verdict, not a validation error.
Status validate(const layout::Layout& c, const Job& job);

}  // namespace weft::planner
