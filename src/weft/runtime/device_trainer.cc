#include "weft/runtime/device_trainer.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <vector>

#include "weft/core/check.h"
#include "weft/model/gemm_shapes.h"
#include "weft/schedule/schedule.h"

namespace weft::runtime {
namespace {

// This rank's lowered program.
schedule::Schedule device_schedule(const model::GptConfig& cfg, int microbatches,
                                   const DeviceParallel& p) {
  WEFT_CHECK(p.pp >= 1 && p.pp_rank >= 0 && p.pp_rank < p.pp, "invalid device pipeline: pipeline ",
             "rank ", p.pp_rank, " of ", p.pp);
  return runner_schedule(cfg, p.schedule, p.pp, p.vp, microbatches)
      .value_or_throw("invalid device pipeline");
}

}  // namespace

model::MemoryEstimate DeviceTrainer::bytes(const model::GptConfig& cfg, int B, int T,
                                           int microbatches, const DeviceParallel& parallel,
                                           model::Recompute recompute) {
  // The one memory model, as the runner predicts itself (rank_memory), in the arena's units.
  return rank_memory(cfg, device_schedule(cfg, microbatches, parallel),
                     {.B = B,
                      .T = T,
                      .recompute = recompute,
                      .pp_rank = parallel.pp_rank,
                      .tp = {parallel.tp, parallel.sequence_parallel},
                      .zero = {parallel.zero, parallel.dp}},
                     Precision::BF16Mixed, 1, 0);
}

int64_t DeviceTrainer::arena_bytes(const model::GptConfig& cfg, int B, int T, int microbatches,
                                   const DeviceParallel& parallel, model::Recompute recompute) {
  int64_t gemm = 0;  // bf16 input, weight and output of the largest forward GEMM
  for (const model::GemmShape& g : model::training_gemm_shapes(cfg, B, T)) {
    gemm = std::max<int64_t>(gemm, 2 * (g.M * g.K + g.N * g.K + g.M * g.N) + 3 * 256);
  }
  return bytes(cfg, B, T, microbatches, parallel, recompute).total() + gemm + (int64_t{64} << 20);
}

namespace {
// The runner's options for a DeviceParallel, checked.
PipelineOptions options_of(kernels::Backend& backend, int B, int T, optim::AdamWConfig adamw,
                           const DeviceParallel& p, model::Recompute recompute) {
  const bool holds_wte = p.pp_rank == 0 || p.pp_rank == p.pp - 1;
  WEFT_CHECK(p.pp == 1 || (p.pp_group != nullptr && p.pp_data != nullptr &&
                           (p.embedding_data != nullptr || !holds_wte)),
             "a device pipeline of ", p.pp, " ranks needs its pp group, and its first and last ",
             "ranks their embedding group");
  WEFT_CHECK((p.dp_group == nullptr) == (p.dp_data == nullptr),
             "the replicas need both their host and their data communicator");
  WEFT_CHECK(p.dp == (p.dp_group != nullptr ? p.dp_group->size() : 1), "dp = ", p.dp,
             " but the replicas' group has ", p.dp_group != nullptr ? p.dp_group->size() : 1,
             " ranks");
  WEFT_CHECK(p.tp == 1 || (p.tp_data != nullptr && p.tp_data->size() == p.tp &&
                           (p.pp == 1 || p.model_group != nullptr)),
             "tensor parallelism of ", p.tp, " needs its tp group (and with a pipeline, the ",
             "replica's model group)");
  PipelineOptions o;
  o.backend = &backend;
  o.B = B;
  o.T = T;
  o.recompute = recompute;
  o.tp = {p.tp > 1 ? p.tp_data : nullptr, p.sequence_parallel};
  o.pp = p.pp_group;
  o.dp = p.dp_group;
  o.pp_data = p.pp_data;
  o.dp_data = p.dp_data;
  o.pp_rank = p.pp_rank;
  o.zero = p.zero;
  o.groups = {p.model_group != nullptr ? p.model_group : p.pp_group, p.embedding_data};
  o.adamw = adamw;
  return o;
}
}  // namespace

DeviceTrainer::DeviceTrainer(kernels::Backend& backend, const model::GptConfig& cfg, int B, int T,
                             int microbatches, optim::AdamWConfig adamw, DeviceParallel parallel,
                             model::Recompute recompute)
    : PipelineRunner(cfg, device_schedule(cfg, microbatches, parallel),
                     options_of(backend, B, T, adamw, parallel, recompute)) {}

DeviceTrainer::~DeviceTrainer() = default;

DeviceParallel device_parallel(
    const parallel::ProcessGroups& groups, int tp, int pp, int dp, int pp_rank, int vp,
    schedule::Kind schedule, const std::function<comm::Communicator*(comm::Communicator&)>& data) {
  auto on_backend = [&](comm::Communicator* host) -> comm::Communicator* {
    return host != nullptr && host->size() > 1 ? data(*host) : nullptr;
  };
  auto host_group = [](comm::Communicator* g) {
    return g != nullptr && g->size() > 1 ? g : nullptr;
  };
  DeviceParallel p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.vp = vp;
  p.pp_rank = pp_rank;
  p.schedule = schedule;
  p.pp_group = pp > 1 ? host_group(groups.pp.get()) : nullptr;
  p.dp_group = dp > 1 ? host_group(groups.dp.get()) : nullptr;
  p.model_group = host_group(groups.model.get());
  p.tp_data = tp > 1 ? on_backend(groups.tp.get()) : nullptr;
  p.pp_data = on_backend(p.pp_group);
  p.dp_data = on_backend(p.dp_group);
  p.embedding_data = pp > 1 ? on_backend(groups.embedding.get()) : nullptr;
  return p;
}

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
