#include "weft/optim/distributed_optimizer.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "weft/core/check.h"
#include "weft/kernels/kernels.h"
#include "weft/model/zero_parts.h"
#include "weft/tensor/zero_shards.h"

namespace weft::optim {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

model::ParamStorage DistributedOptimizer::storage(int zero, int dp) {
  model::ParamStorage s;
  s.unit_align = model::zero_unit_align(zero, dp);
  s.model_grads = zero < 2;  // from ZeRO-2 on a unit's gradients live in pool_ while in use
  s.model_params = zero < 3;
  return s;
}

DistributedOptimizer::DistributedOptimizer(model::Gpt& model, comm::Communicator* dp, int zero,
                                           AdamWConfig cfg, UnitPool* pool)
    : model_(model), dp_(dp), zero_(zero), pool_(pool) {
  if (pool_ == nullptr) {
    own_pool_ = std::make_unique<UnitPool>();
    pool_ = own_pool_.get();
  }
  WEFT_CHECK(zero >= 0 && zero <= 3, "ZeRO stage ", zero, " is not 0, 1, 2 or 3");
  if (dp_ == nullptr) {
    local_dp_ = comm::make_local_communicator("dp");
    dp_ = local_dp_.get();
  }
  const model::ParamLayout& layout = model.param_layout();
  if (zero_ == 0) {
    parts_ = model.whole_grads();
    adam_ = std::make_unique<AdamW>(layout.buffer, layout.weight_decay_flags(), cfg);
    model.set_param_hooks(this);
    return;
  }
  const int n = dp_->size();
  WEFT_CHECK(layout.unit_align % storage(zero, n).unit_align == 0,
             "a ZeRO chunk needs the layout of DistributedOptimizer::storage(", zero, ", ", n, ")");
  int64_t offset = 0, largest = 0;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const model::ParamUnit& U = layout.units[u];
    const ShardRange own = zero_shard(U.numel(), n, dp_->rank());
    const int64_t next =
        u + 1 < layout.units.size() ? layout.units[u + 1].begin : layout.buffer.total();
    shards_.push_back({own.begin, own.size(), offset});
    WEFT_CHECK(own.size() * n <= next - U.begin, "unit ", U.name, "'s padded range overruns");
    offset += own.size();
    largest = std::max(largest, own.size());
  }
  std::vector<AdamW::Run> runs;
  std::vector<int64_t> at;  // each part's offset in the shard buffers
  for (const model::OwnedPart& p : model::zero_owned_parts(layout, zero_, n, dp_->rank())) {
    at.push_back(p.at);
    parts_.push_back({p.slice, nullptr, p.n});
    part_begin_.push_back(layout.buffer.slices()[p.slice].offset + p.begin);
    runs.push_back({p.at, p.n, layout.init[p.slice].weight_decay});
  }
  master_ = AlignedBuffer<float>(offset);
  grad_shard_ = AlignedBuffer<float>(offset);
  for (size_t i = 0; i < parts_.size(); ++i) parts_[i].grad = grad_shard_.data() + at[i];
  adam_ = std::make_unique<AdamW>(offset, std::move(runs), cfg);
  if (zero_ >= 2) {
    for (int i = 0; i < model::kZeroBucketsInFlight; ++i) tmp_.emplace_back(largest);
  }
  grad_slot_.assign(layout.units.size(), nullptr);
  shard_started_.assign(layout.units.size(), false);
  param_slot_.assign(layout.units.size(), nullptr);
  model.set_param_hooks(this);
}

DistributedOptimizer::~DistributedOptimizer() {
  model_.set_param_hooks(nullptr);
  // Reductions in flight read the model's buffers: let them finish, unless an error unwinds (the
  // job is ending and a peer may never join).
  if (std::uncaught_exceptions() > 0) return;
  try {
    for (auto& p : pending_) p.work.wait();
  } catch (const std::exception&) {
  }
}

void DistributedOptimizer::init(uint64_t seed) {
  if (zero_ == 0) {
    model_.init(seed);
    return;
  }
  // Only this rank's parts, straight into the master shard (1/dp of the work, and ZeRO 3 never
  // has the full parameters resident); ZeRO 1/2 then gather the model's copy.
  const model::ParamLayout& layout = model_.param_layout();
  for (const model::OwnedPart& p :
       model::zero_owned_parts(layout, zero_, dp_->size(), dp_->rank())) {
    model::init_slice(layout, p.slice, seed, p.begin, p.n, master_.data() + p.at);
  }
  if (zero_ <= 2) gather_all();
}

const float* DistributedOptimizer::gather(int u) {
  if (zero_ < 3) return model_.params().data() + unit(u).begin;
  if (param_slot_[u] == nullptr) {
    const Shard& sh = shards_[u];
    param_slot_[u] = pool_->acquire(padded(u), /*zeroed=*/false);  // the all-gather writes it all
    dp_->all_gather(param_slot_[u], master_.data() + sh.offset, sh.size);
  }
  return param_slot_[u];
}

void DistributedOptimizer::release(int u) {
  if (zero_ < 3 || param_slot_[u] == nullptr) return;
  pool_->release(param_slot_[u]);
  param_slot_[u] = nullptr;
}

float* DistributedOptimizer::grads(int u) {
  if (zero_ < 2) return model_.grads().data() + unit(u).begin;
  // Zeroed, including the padding the reduce-scatter reads past the unit's last element.
  if (grad_slot_[u] == nullptr) grad_slot_[u] = pool_->acquire(padded(u), /*zeroed=*/true);
  return grad_slot_[u];
}

void DistributedOptimizer::grads_ready(int u) {
  if (zero_ <= 1 && !final_pass_) return;  // accumulate until the last microbatch
  if (zero_ == 0 && dp_->size() == 1) return;
  // Backward calls here once per unit: the chance to progress what is in flight (MPI advances
  // nonblocking collectives only inside MPI calls). A bounded number in flight: each holds the MPI
  // library's temporaries (and, from ZeRO 2 on, a unit's full gradient pages) until it completes.
  for (Pending& p : pending_) p.work.test();
  if (pending_.size() >= static_cast<size_t>(model::kZeroBucketsInFlight)) complete_oldest();
  float* g = grads(u);
  const Shard* sh = zero_ > 0 ? &shards_[u] : nullptr;
  switch (zero_) {
    case 0:
      pending_.push_back(
          {u, -1,
           dp_->all_reduce_async(g, unit(u).numel(), comm::DataType::F32, comm::ReduceOp::Sum)});
      return;
    default: {
      // ZeRO 1's one reduction, and ZeRO 2/3's first of the step: the reduced shard is the step's
      // gradient so far, straight into place. Later passes arrive in tmp_ and are added.
      if (zero_ == 1 || !shard_started_[u]) {
        shard_started_[u] = true;
        pending_.push_back({u, -1,
                            dp_->reduce_scatter_async(grad_shard_.data() + sh->offset, g, sh->size,
                                                      comm::DataType::F32)});
        return;
      }
      const int t = next_tmp_;
      next_tmp_ = (next_tmp_ + 1) % static_cast<int>(tmp_.size());
      pending_.push_back(
          {u, t, dp_->reduce_scatter_async(tmp_[t].data(), g, sh->size, comm::DataType::F32)});
      return;
    }
  }
}

// Waits for the oldest reduction in flight. ZeRO 2/3: this microbatch's reduced gradient joins the
// shard, and the unit's full gradient goes back to the pool (the next pass starts from zero).
void DistributedOptimizer::complete_oldest() {
  Pending p = std::move(pending_.front());
  pending_.erase(pending_.begin());
  const auto t0 = std::chrono::steady_clock::now();
  p.work.wait();
  wait_seconds_ += seconds_since(t0);
  if (zero_ < 2) return;
  if (p.tmp >= 0) {
    const Shard& sh = shards_[p.unit];
    float* dst = grad_shard_.data() + sh.offset;
    const float* src = tmp_[p.tmp].data();
    for (int64_t i = 0; i < sh.size; ++i) dst[i] += src[i];
  }
  pool_->release(grad_slot_[p.unit]);
  grad_slot_[p.unit] = nullptr;
}

void DistributedOptimizer::backward_done() {
  // ZeRO 2/3: the next pass adds into the same units, so nothing of them may still be in flight.
  // ZeRO 0/1 reduce after the last pass only: their reductions may run on into other chunks'
  // passes.
  if (zero_ < 2) return;
  while (!pending_.empty()) complete_oldest();
}

void DistributedOptimizer::finish_reduction() {
  while (!pending_.empty()) complete_oldest();
  if (dp_->size() == 1) return;
  // Sums over replicas of their means over m microbatches, made the mean over m * dp.
  const float inv = 1.0f / static_cast<float>(dp_->size());
  if (zero_ == 0) {
    kernels::cpu::scale(model_.grads().data(), inv, model_.grads().size());
  } else {
    kernels::cpu::scale(grad_shard_.data(), inv, grad_shard_.size());
  }
}

double DistributedOptimizer::time_reductions_alone(int microbatches) {
  if (zero_ == 0 && dp_->size() == 1) return 0;
  const int passes = zero_ >= 2 ? microbatches : 1;
  std::vector<float> out(tmp_.empty() ? 0 : tmp_[0].size());
  dp_->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  const int units = static_cast<int>(model_.param_layout().units.size());
  for (int k = 0; k < passes; ++k) {
    for (int u = 0; u < units; ++u) {
      float* g = grads(u);  // ZeRO 2/3: a pool buffer, as a backward pass would take
      if (zero_ == 0) {
        dp_->all_reduce(g, unit(u).numel());
      } else {
        dp_->reduce_scatter(zero_ == 1 ? grad_shard_.data() + shards_[u].offset : out.data(), g,
                            shards_[u].size);
      }
      if (zero_ >= 2) {
        pool_->release(grad_slot_[u]);
        grad_slot_[u] = nullptr;
      }
    }
  }
  return seconds_since(t0);
}

void DistributedOptimizer::gather_all() {
  std::vector<comm::Work> works;  // a bounded number in flight, as the reductions
  for (size_t u = 0; u < shards_.size(); ++u) {
    if (works.size() >= static_cast<size_t>(model::kZeroBucketsInFlight)) {
      works.front().wait();
      works.erase(works.begin());
    }
    const Shard& sh = shards_[u];
    works.push_back(dp_->all_gather_async(model_.params().data() + unit(static_cast<int>(u)).begin,
                                          master_.data() + sh.offset, sh.size,
                                          comm::DataType::F32));
  }
  for (auto& w : works) w.wait();
}

void DistributedOptimizer::step(float lr) {
  if (zero_ == 0) {
    adam_->step(model_.params(), model_.grads(), lr);
    return;
  }
  adam_->step(master_.data(), grad_shard_.data(), lr);
  if (zero_ <= 2) gather_all();
  // Accumulated afresh over the next step's microbatches: each unit's first reduction overwrites
  // its range of the shard.
  if (zero_ >= 2) shard_started_.assign(shard_started_.size(), false);
}

DistributedOptimizer::StateView DistributedOptimizer::state() {
  if (zero_ == 0) return {model_.params().data(), adam_->m().data(), adam_->v().data()};
  return {master_.data(), adam_->m().data(), adam_->v().data()};
}

void DistributedOptimizer::state_loaded(int step_count) {
  adam_->set_step_count(step_count);
  if (zero_ == 1 || zero_ == 2) {
    gather_all();  // the model's parameters from every rank's master shard
  } else if (zero_ == 3) {
    for (int u = 0; u < static_cast<int>(param_slot_.size()); ++u) release(u);  // gathered anew
  }
}

}  // namespace weft::optim
