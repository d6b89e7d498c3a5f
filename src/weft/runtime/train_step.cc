#include "weft/runtime/train_step.h"

#include <cmath>

#include "weft/core/check.h"
#include "weft/kernels/kernels.h"

namespace weft::runtime {
namespace {

// The part of `opt`'s gradients that belongs to the tied word embedding: the whole wte, or (ZeRO)
// this rank's range of it, which is the same range on the first and the last stage (wte is a unit
// of its own, of the same size on both).
std::span<float> wte_grad(const model::Gpt& m, const DistributedOptimizer& opt) {
  const auto& slices = m.param_layout().buffer.slices();
  for (const model::GradPart& g : opt.grad_parts()) {
    if (slices[g.slice].name == "wte") return {g.grad, static_cast<size_t>(g.n)};
  }
  return {};
}

// The tied embedding (Press & Wolf 2017): the first stage's wte and the last stage's copy are one
// parameter, so each copy gets the sum of both gradients and the copies stay equal.
void sync_tied_embedding(std::span<model::Gpt* const> chunks,
                         std::span<DistributedOptimizer* const> opts,
                         comm::Communicator* embedding) {
  int first = -1, last = -1;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i]->stage().embedding && !chunks[i]->stage().head) first = static_cast<int>(i);
    if (chunks[i]->stage().head && !chunks[i]->stage().embedding) last = static_cast<int>(i);
  }
  if (first >= 0 && last >= 0) {  // both on this rank (pp = 1, vp > 1)
    const std::span<float> a = wte_grad(*chunks[first], *opts[first]);
    const std::span<float> b = wte_grad(*chunks[last], *opts[last]);
    WEFT_CHECK(a.size() == b.size(), "the tied embedding's copies differ in size");
    for (size_t i = 0; i < a.size(); ++i) b[i] = a[i] = a[i] + b[i];
  } else if (first >= 0 || last >= 0) {
    WEFT_CHECK(embedding != nullptr, "a pipeline needs its embedding group");
    const int c = first >= 0 ? first : last;
    const std::span<float> g = wte_grad(*chunks[c], *opts[c]);
    embedding->all_reduce(g.data(), static_cast<int64_t>(g.size()));
  }
}

}  // namespace

StepStats finish_step(std::span<model::Gpt* const> chunks,
                      std::span<DistributedOptimizer* const> opts, const ModelGroups& groups,
                      float loss, float lr, double clip_norm, const BeforeUpdate& before_update) {
  StepStats s;
  s.loss = loss;
  for (DistributedOptimizer* o : opts) o->finish_reduction();
  sync_tied_embedding(chunks, opts, groups.embedding);
  double sum_squares = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    chunks[i]->finish_grad_sync(opts[i]->grad_parts());
    sum_squares += chunks[i]->grad_sum_squares(opts[i]->grad_parts());
  }
  if (groups.model != nullptr) groups.model->all_reduce(&sum_squares, 1);
  // ZeRO: each replica holds a different shard of the gradients.
  if (comm::Communicator* shards = opts[0]->shard_group()) shards->all_reduce(&sum_squares, 1);
  s.grad_norm = std::sqrt(sum_squares);
  if (before_update) before_update();
  s.skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  if (s.skipped) return s;
  const float clip = optim::clip_factor(s.grad_norm, clip_norm);
  for (DistributedOptimizer* o : opts) {
    if (clip != 1.0f) {
      for (const model::GradPart& g : o->grad_parts()) kernels::cpu::scale(g.grad, clip, g.n);
    }
    o->step(lr);
  }
  return s;
}

StepStats train_step(model::Gpt& model, DistributedOptimizer& opt, const int32_t* tokens,
                     const int32_t* targets, int B, int T, int microbatches, float lr,
                     double clip_norm, const BeforeUpdate& before_update) {
  model.zero_grad();
  double loss_sum = 0;
  const int64_t block = int64_t{B} * T;
  for (int mb = 0; mb < microbatches; ++mb) {
    loss_sum += model.forward(tokens + mb * block, targets + mb * block, B, T);
    opt.set_final_pass(mb == microbatches - 1);
    model.backward(1.0f / static_cast<float>(microbatches));
  }
  model::Gpt* chunks[] = {&model};
  DistributedOptimizer* opts[] = {&opt};
  return finish_step(chunks, opts, {model.tensor_parallel().comm, nullptr},
                     static_cast<float>(loss_sum / microbatches), lr, clip_norm, before_update);
}

}  // namespace weft::runtime
