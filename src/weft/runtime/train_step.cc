#include "weft/runtime/train_step.h"

#include <cmath>

namespace weft::runtime {

StepStats train_step(model::Gpt& model, optim::AdamW& opt, const int32_t* tokens,
                     const int32_t* targets, int B, int T, int microbatches, float lr,
                     double clip_norm) {
  StepStats s;
  model.zero_grad();
  double loss_sum = 0;
  const int64_t block = int64_t{B} * T;
  for (int mb = 0; mb < microbatches; ++mb) {
    loss_sum += model.forward(tokens + mb * block, targets + mb * block, B, T);
    model.backward(1.0f / static_cast<float>(microbatches));
  }
  s.loss = static_cast<float>(loss_sum / microbatches);
  // The global norm over every parameter element once, whatever the tensor-parallel split.
  model.finish_grad_sync();
  double sum_squares = model.grad_sum_squares();
  if (auto* tp = model.tensor_parallel().comm) tp->all_reduce(&sum_squares, 1);
  s.grad_norm = std::sqrt(sum_squares);
  optim::clip_to_norm(model.grads(), s.grad_norm, clip_norm);
  s.skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  if (!s.skipped) opt.step(model.params(), model.grads(), lr);
  return s;
}

}  // namespace weft::runtime
