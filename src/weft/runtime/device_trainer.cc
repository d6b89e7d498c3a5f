#include "weft/runtime/device_trainer.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>
#include <vector>

#include "weft/core/check.h"
#include "weft/model/gemm_shapes.h"
#include "weft/schedule/schedule.h"

namespace weft::runtime {
namespace {
schedule::Schedule one_process_schedule(const model::GptConfig& cfg, int microbatches) {
  return runner_schedule(cfg, schedule::Kind::OneFOneB, 1, 1, microbatches)
      .value_or_throw("invalid device trainer");
}
// The one process's shape: the whole model, no tensor parallelism, no ZeRO.
RankShape one_process_shape(int B, int T, model::Recompute recompute) {
  RankShape s;
  s.B = B;
  s.T = T;
  s.recompute = recompute;
  return s;
}
// A device trainer's options name their backend (else the runner would make a host fp32 one).
PipelineOptions with_backend(PipelineOptions o) {
  WEFT_CHECK(o.backend != nullptr, "a device trainer needs its backend (PipelineOptions::backend)");
  return o;
}
}  // namespace

model::MemoryEstimate DeviceTrainer::bytes(const model::GptConfig& cfg,
                                           const schedule::Schedule& schedule,
                                           const RankShape& shape) {
  // The one memory model, as the runner predicts itself (rank_memory), in the arena's units.
  return rank_memory(cfg, schedule, shape, Precision::BF16Mixed, 1, 0);
}

model::MemoryEstimate DeviceTrainer::bytes(const model::GptConfig& cfg, int B, int T,
                                           int microbatches, model::Recompute recompute) {
  return bytes(cfg, one_process_schedule(cfg, microbatches), one_process_shape(B, T, recompute));
}

int64_t DeviceTrainer::arena_bytes(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                                   const RankShape& shape) {
  int64_t gemm = 0;  // bf16 input, weight and output of the largest forward GEMM
  for (const model::GemmShape& g : model::training_gemm_shapes(cfg, shape.B, shape.T)) {
    gemm = std::max<int64_t>(gemm, 2 * (g.M * g.K + g.N * g.K + g.M * g.N) + 3 * 256);
  }
  return bytes(cfg, schedule, shape).total() + gemm + (int64_t{64} << 20);
}

int64_t DeviceTrainer::arena_bytes(const model::GptConfig& cfg, int B, int T, int microbatches,
                                   model::Recompute recompute) {
  return arena_bytes(cfg, one_process_schedule(cfg, microbatches),
                     one_process_shape(B, T, recompute));
}

DeviceTrainer::DeviceTrainer(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                             PipelineOptions options)
    : PipelineRunner(cfg, schedule, with_backend(std::move(options))) {}

DeviceTrainer::DeviceTrainer(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                             int microbatches, optim::AdamWConfig adamw, model::Recompute recompute)
    : DeviceTrainer(cfg, one_process_schedule(cfg, microbatches),
                    pipeline_options({}, one_process_shape(B, T, recompute), adamw, &backend)) {}

DeviceTrainer::~DeviceTrainer() = default;

void DeviceTrainer::download_state(int j, float* params, float* m, float* v) const {
  optim::DistributedOptimizer& o = *optimizers()[j];
  const int64_t n = model(j).param_layout().buffer.total();
  WEFT_CHECK(o.zero() == 0, "whole-chunk state is ZeRO 0's");
  o.read_state(0, 0, n, params);
  o.read_state(1, 0, n, m);
  o.read_state(2, 0, n, v);
}

void DeviceTrainer::upload_state(int j, const float* params, const float* m, const float* v,
                                 int step_count) {
  optim::DistributedOptimizer& o = *optimizers()[j];
  const int64_t n = model(j).param_layout().buffer.total();
  WEFT_CHECK(o.zero() == 0, "whole-chunk state is ZeRO 0's");
  o.write_state(0, 0, n, params);
  o.write_state(1, 0, n, m);
  o.write_state(2, 0, n, v);
  o.state_loaded(step_count);
}

double device_gemm_ceiling(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                           int reps) {
  double flops = 0, seconds = 0;
  for (const model::GemmShape& g : model::training_gemm_shapes(cfg, B, T)) {
    if (g.trans_a || !g.trans_b) continue;  // the forward shapes: [M,K] @ [N,K]^T
    const double s = backend.linear_forward_seconds(static_cast<int>(g.M), static_cast<int>(g.K),
                                                    static_cast<int>(g.N), reps);
    flops += g.flops();
    seconds += s * g.count;
  }
  return seconds > 0 ? flops / seconds : 0.0;
}

}  // namespace weft::runtime
