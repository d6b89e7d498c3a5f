#pragma once
// One training step of a model without a pipeline, the equivalence tests' serial and
// tensor-parallel reference: zero the gradients, forward + backward over the microbatches
// (gradient accumulation), then runtime::finish_step, which ends the runtime's steps too.

#include <cstdint>

#include "weft/comm/communicator.h"
#include "weft/model/gpt.h"
#include "weft/optim/distributed_optimizer.h"
#include "weft/runtime/train_step.h"

namespace weft::test {

// tokens/targets: `microbatches` consecutive [B,T] blocks; `opt` is the model's optimizer (dp
// group or not; `replicas`: the same group, host memory, for the norm under ZeRO 1-3).
inline runtime::StepStats train_step(model::Gpt& model, optim::DistributedOptimizer& opt,
                                     const int32_t* tokens, const int32_t* targets, int B, int T,
                                     int microbatches, float lr, double clip_norm,
                                     const runtime::BeforeUpdate& before_update = {},
                                     comm::Communicator* replicas = nullptr) {
  model.zero_grad();
  // The mean over every replica's microbatches: the replicas' gradients are summed.
  const int dp = opt.dp_size();
  double loss_sum = 0;
  const int64_t block = int64_t{B} * T;
  for (int mb = 0; mb < microbatches; ++mb) {
    loss_sum += model.forward(tokens + mb * block, targets + mb * block, B, T, 0,
                              1.0f / static_cast<float>(microbatches * dp));
    opt.set_final_pass(mb == microbatches - 1);
    model.backward();
  }
  model::Gpt* chunks[] = {&model};
  optim::DistributedOptimizer* opts[] = {&opt};
  return runtime::finish_step(chunks, opts, {model.tensor_parallel().comm, nullptr, replicas},
                              static_cast<float>(loss_sum / microbatches), lr, clip_norm,
                              before_update);
}

}  // namespace weft::test
