#pragma once
// What the planner is asked about: a training job (model, sequence length, global batch, world,
// number formats) and one parallel configuration of it (tp, pp, dp, vp, microbatch size,
// schedule, recomputation, sequence parallelism, ZeRO stage). Both validated with every problem
// listed in the user's terms.

#include <string>
#include <string_view>

#include "weft/core/dtype.h"
#include "weft/core/status.h"
#include "weft/layout/validate.h"
#include "weft/model/gpt_config.h"
#include "weft/model/recompute.h"
#include "weft/schedule/instr.h"

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
};

struct ParallelConfig {
  int tp = 1, pp = 1, dp = 1;
  int vp = 1;           // model chunks per pipeline rank (interleaved only)
  int micro_batch = 1;  // b, sequences per microbatch
  schedule::Kind schedule = schedule::Kind::OneFOneB;
  model::Recompute recompute = model::Recompute::None;
  bool sequence_parallel = false;
  int zero = 0;  // ZeRO stage 0-3 over the dp group (Rajbhandari et al. 2020)

  // m = B / (dp * b): microbatches per step on each pipeline.
  int microbatches(const Job& job) const { return job.global_batch / (dp * micro_batch); }
  bool operator==(const ParallelConfig&) const = default;
};

// "tp=8,pp=8,dp=16,vp=2,mb=1,schedule=interleaved,recompute=full,sp=1,zero=1"; keys may come in
// any order, missing ones keep their defaults, dp may be omitted (then world / (tp*pp)).
Result<ParallelConfig> parse_parallel_config(std::string_view text, int world);
std::string to_string(const ParallelConfig& c);
// The short form used in tables: "tp8 pp8 dp16 vp2 mb1 interleaved full sp z1".
std::string short_name(const ParallelConfig& c);

Status validate(const Job& job);

layout::Layout to_layout(const ParallelConfig& c, const Job& job);

// Every reason this configuration cannot run the job at all, independent of memory: the trainer's
// own layout rules (layout::validate, the same for every device and precision: divisibility,
// schedule shape, "n_head=96 is not divisible by tp=5 ...") and tp*pp*dp against the world. Memory
// is the planner's verdict, not a validation error.
Status validate(const ParallelConfig& c, const Job& job);

}  // namespace weft::planner
