#include "weft/runtime/train_step.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "weft/core/check.h"

namespace weft::runtime {
namespace {

// The part of `opt`'s gradients that belongs to the tied word embedding: the whole wte, or (ZeRO)
// this rank's range of it, which is the same range on the first and the last stage (wte is a unit
// of its own, of the same size on both).
std::span<float> wte_grad(const model::Gpt& m, const optim::DistributedOptimizer& opt) {
  const auto& slices = m.param_layout().buffer.slices();
  for (const optim::GradPart& g : opt.grad_parts()) {
    if (slices[g.slice].name == "wte") return {g.grad, static_cast<size_t>(g.n)};
  }
  return {};
}

// The tied embedding (Press & Wolf 2017): the first stage's wte and the last stage's copy are one
// parameter, so each copy gets the sum of both gradients and the copies stay equal.
void sync_tied_embedding(std::span<model::Gpt* const> chunks,
                         std::span<optim::DistributedOptimizer* const> opts,
                         comm::Communicator* embedding) {
  if (chunks.empty() || !chunks.front()->config().tie_embeddings) return;  // lm_head: its own
  int first = -1, last = -1;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i]->stage().embedding && !chunks[i]->stage().head) first = static_cast<int>(i);
    if (chunks[i]->stage().head && !chunks[i]->stage().embedding) last = static_cast<int>(i);
  }
  if (first >= 0 && last >= 0) {  // both on this rank (pp = 1, vp > 1)
    const std::span<float> a = wte_grad(*chunks[first], *opts[first]);
    const std::span<float> b = wte_grad(*chunks[last], *opts[last]);
    WEFT_CHECK(a.size() == b.size(), "the tied embedding's copies differ in size");
    kernels::Backend& be = chunks[first]->backend();
    be.accumulate(a.data(), b.data(), static_cast<int64_t>(a.size()));
    be.copy(b.data(), a.data(), static_cast<int64_t>(a.size()) * 4);
  } else if (first >= 0 || last >= 0) {
    WEFT_CHECK(embedding != nullptr, "a pipeline needs its embedding group");
    const int c = first >= 0 ? first : last;
    const std::span<float> g = wte_grad(*chunks[c], *opts[c]);
    embedding
        ->all_reduce_async(g.data(), static_cast<int64_t>(g.size()), comm::DataType::F32,
                           comm::ReduceOp::Sum)
        .order();
  }
}

// The backend's sum of squares over runs of parts of adjacent slices, merged across the zero
// padding between them (the model zeroes its buffers once; a shard's padding receives zeros): one
// call, and on a device one wait, per run rather than per tensor.
double sum_squares(kernels::Backend& be, std::span<const optim::GradPart> parts) {
  double sum = 0;
  for (size_t i = 0; i < parts.size();) {
    size_t k = i + 1;
    while (k < parts.size() && parts[k].slice == parts[k - 1].slice + 1 &&
           parts[k].grad >= parts[k - 1].grad + parts[k - 1].n) {
      ++k;
    }
    const float* begin = parts[i].grad;
    sum += be.sum_squares(begin, parts[k - 1].grad + parts[k - 1].n - begin);
    i = k;
  }
  return sum;
}

// Whether slice `slice` of a stage's layout counts in tp rank `tp_rank`'s share of the norm.
bool counts_in_grad_norm(const model::ParamLayout& layout, size_t slice,
                         const model::StageSpec& stage, int tp_rank) {
  if (layout.splits[slice].replicated() && tp_rank != 0) return false;
  // The last stage's copy of the tied embedding is the first stage's parameter: counted there.
  return !(layout.buffer.slices()[slice].name == "wte" && !stage.embedding);
}

}  // namespace

GradNorm global_grad_norm(std::span<const NormChunk> chunks, const SumSquares& sum_squares,
                          comm::Communicator* model_group, comm::Communicator* shard_group,
                          float loss, double clip_norm) {
  double sum = 0;
  std::vector<optim::GradPart> counted;
  for (const NormChunk& c : chunks) {
    counted.clear();
    for (const optim::GradPart& g : c.parts) {
      if (counts_in_grad_norm(*c.layout, g.slice, c.stage, c.tp_rank)) counted.push_back(g);
    }
    sum += sum_squares(counted);
  }
  if (model_group != nullptr) model_group->all_reduce(&sum, 1);
  // ZeRO: each replica holds a different shard of the gradients.
  if (shard_group != nullptr) shard_group->all_reduce(&sum, 1);
  GradNorm r;
  r.norm = std::sqrt(sum);
  r.skipped = !std::isfinite(loss) || !std::isfinite(r.norm);
  if (!r.skipped) r.clip = optim::clip_factor(r.norm, clip_norm);
  return r;
}

StepStats finish_step(std::span<model::Gpt* const> chunks,
                      std::span<optim::DistributedOptimizer* const> opts, const ModelGroups& groups,
                      float loss, float lr, double clip_norm, const BeforeUpdate& before_update) {
  StepStats s;
  s.loss = loss;
  for (optim::DistributedOptimizer* o : opts) o->finish_reduction();
  sync_tied_embedding(chunks, opts, groups.embedding);
  std::vector<NormChunk> norm_chunks;
  // The host reads the norm next: the device's waits of the step are bounded here, once per group
  // on the backend's memory that the step used (comm::Communicator::wait_ordered).
  std::vector<comm::Communicator*> ordered = {groups.embedding, groups.boundary};
  for (size_t i = 0; i < chunks.size(); ++i) {
    chunks[i]->finish_grad_sync(opts[i]->grad_parts());
    ordered.push_back(chunks[i]->tensor_parallel().comm);
    ordered.push_back(&opts[i]->dp_group());
    norm_chunks.push_back({&chunks[i]->param_layout(), chunks[i]->stage(),
                           chunks[i]->tensor_parallel().rank(), opts[i]->grad_parts()});
  }
  std::sort(ordered.begin(), ordered.end(), std::less<>());  // by address, to drop repeats
  ordered.erase(std::unique(ordered.begin(), ordered.end()), ordered.end());
  for (comm::Communicator* c : ordered) {
    if (c != nullptr) c->wait_ordered();
  }
  WEFT_CHECK(!opts[0]->sharded() || groups.replicas != nullptr,
             "ZeRO's gradient shards need the replicas' group for the norm");
  kernels::Backend& be = chunks[0]->backend();
  const GradNorm norm = global_grad_norm(
      norm_chunks, [&](std::span<const optim::GradPart> parts) { return sum_squares(be, parts); },
      groups.model, opts[0]->sharded() ? groups.replicas : nullptr, loss, clip_norm);
  s.grad_norm = norm.norm;
  if (before_update) before_update();
  s.skipped = norm.skipped;
  if (s.skipped) return s;
  for (optim::DistributedOptimizer* o : opts) o->step(lr, norm.clip);
  return s;
}

}  // namespace weft::runtime
