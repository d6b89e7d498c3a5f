#include "weft/runtime/train_step.h"

#include <cmath>

#include "weft/core/check.h"

namespace weft::runtime {
namespace {

float* wte_grad(model::Gpt& m) { return m.grads().ptr("wte"); }
int64_t wte_numel(const model::Gpt& m) { return m.param_layout().buffer.at("wte").numel; }

// The tied embedding (Press & Wolf 2017): the first stage's wte and the last stage's copy are one
// parameter, so each copy gets the sum of both gradients and the copies stay equal.
void sync_tied_embedding(std::span<model::Gpt* const> chunks, comm::Communicator* embedding) {
  model::Gpt *first = nullptr, *last = nullptr;
  for (model::Gpt* c : chunks) {
    if (c->stage().embedding && !c->stage().head) first = c;
    if (c->stage().head && !c->stage().embedding) last = c;
  }
  if (first != nullptr && last != nullptr) {  // both on this rank (pp = 1, vp > 1)
    float* a = wte_grad(*first);
    float* b = wte_grad(*last);
    for (int64_t i = 0, n = wte_numel(*first); i < n; ++i) b[i] = a[i] = a[i] + b[i];
  } else if (model::Gpt* c = first != nullptr ? first : last) {
    WEFT_CHECK(embedding != nullptr, "a pipeline needs its embedding group");
    embedding->all_reduce(wte_grad(*c), wte_numel(*c));
  }
}

}  // namespace

StepStats finish_step(std::span<model::Gpt* const> chunks, std::span<optim::AdamW* const> opts,
                      const ModelGroups& groups, float loss, float lr, double clip_norm) {
  StepStats s;
  s.loss = loss;
  sync_tied_embedding(chunks, groups.embedding);
  double sum_squares = 0;
  for (model::Gpt* c : chunks) {
    c->finish_grad_sync();
    sum_squares += c->grad_sum_squares();
  }
  if (groups.model != nullptr) groups.model->all_reduce(&sum_squares, 1);
  s.grad_norm = std::sqrt(sum_squares);
  s.skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  if (s.skipped) return s;
  for (size_t i = 0; i < chunks.size(); ++i) {
    optim::clip_to_norm(chunks[i]->grads(), s.grad_norm, clip_norm);
    opts[i]->step(chunks[i]->params(), chunks[i]->grads(), lr);
  }
  return s;
}

StepStats train_step(model::Gpt& model, optim::AdamW& opt, const int32_t* tokens,
                     const int32_t* targets, int B, int T, int microbatches, float lr,
                     double clip_norm) {
  model.zero_grad();
  double loss_sum = 0;
  const int64_t block = int64_t{B} * T;
  for (int mb = 0; mb < microbatches; ++mb) {
    loss_sum += model.forward(tokens + mb * block, targets + mb * block, B, T);
    model.backward(1.0f / static_cast<float>(microbatches));
  }
  model::Gpt* chunks[] = {&model};
  optim::AdamW* opts[] = {&opt};
  return finish_step(chunks, opts, {model.tensor_parallel().comm, nullptr},
                     static_cast<float>(loss_sum / microbatches), lr, clip_norm);
}

}  // namespace weft::runtime
