#include "weft/optim/distributed_optimizer.h"

#include <chrono>
#include <exception>

#include "weft/core/check.h"
#include "weft/core/clock.h"
#include "weft/optim/shards.h"

namespace weft::optim {

ParamStorage DistributedOptimizer::storage(int zero, int dp) {
  ParamStorage s;
  s.unit_align = zero_unit_align(zero, dp);
  s.master_params = zero < 1;  // from ZeRO-1 on the fp32 master weights are this rank's shard
  s.model_grads = zero < 2;    // from ZeRO-2 on a unit's gradients live in pool_ while in use
  s.model_params = zero < 3;
  return s;
}

DistributedOptimizer::DistributedOptimizer(Params& model, comm::Communicator* dp, int zero,
                                           AdamWConfig cfg, UnitPool* pool)
    : model_(model),
      be_(model.backend()),
      act_bytes_(model.backend().act_bytes()),
      dp_(dp),
      zero_(zero),
      cfg_(cfg),
      pool_(pool) {
  WEFT_CHECK(zero >= 0 && zero <= 3, "ZeRO stage ", zero, " is not 0, 1, 2 or 3");
  if (pool_ == nullptr) {
    own_pool_ = std::make_unique<UnitPool>(be_);
    pool_ = own_pool_.get();
  }
  WEFT_CHECK(&pool_->backend() == &be_, "a ZeRO unit pool on another backend than its model's");
  if (dp_ == nullptr) {
    local_dp_ = comm::make_local_communicator("dp");
    dp_ = local_dp_.get();
  }
  const UnitLayout& layout = model.param_layout();
  const int n = dp_->size();
  std::vector<kernels::Backend::AdamWSegment> segments;
  // One AdamW segment per run of parts that share the weight-decay decision, across the zero
  // padding between them (which stays zero: its gradients are zero, so its moments and weights
  // are too).
  auto add_segment = [&](float* params, const float* grads, int64_t at, int64_t end, BF16* read,
                         bool decay) {
    const float wd = decay ? cfg_.weight_decay : 0.0f;
    if (!segments.empty()) {
      kernels::Backend::AdamWSegment& last = segments.back();
      if (last.weight_decay == wd && last.m + last.n <= m_ + at) {
        last.n = m_ + end - last.m;
        return;
      }
    }
    segments.push_back({params + at, grads + at, m_ + at, v_ + at,
                        read != nullptr ? read + at : nullptr, end - at, wd});
  };
  auto take = [&](int64_t elements) {
    float* p = be_.allocate<float>(elements);
    be_.zero(p, elements * 4);
    return p;
  };
  // The state's elements: ZeRO 0 the chunk's whole buffers, ZeRO 1-3 this rank's shard buffers.
  float *params = nullptr, *grads = nullptr;
  BF16* read = nullptr;
  if (zero_ == 0) {
    const int64_t total = layout.buffer.total();
    m_ = take(total);
    v_ = take(total);
    params = model.params().data();
    grads = model.grads().data();
    read = model.read_copy();
  } else {
    WEFT_CHECK(layout.unit_align % storage(zero, n).unit_align == 0, "a ZeRO chunk needs the ",
               "layout of DistributedOptimizer::storage(", zero, ", ", n, ")");
    shards_ = zero_unit_shards(layout, n, dp_->rank());
    shard_elements_ = zero_owned_elements(layout, zero_, n, dp_->rank());
    const int64_t size = shard_elements_;
    master_ = params = take(size);
    grad_shard_ = grads = take(size);
    m_ = take(size);
    v_ = take(size);
    if (act_bytes_ == 2) {
      master16_ = read = be_.allocate<BF16>(size);
      be_.zero(master16_, size * 2);
    }
  }
  for (const OwnedPart& p : zero_owned_parts(layout, zero_, n, dp_->rank())) {
    parts_.push_back({p.slice, grads + p.at, p.n});
    add_segment(params, grads, p.at, p.at + p.n, read, model.weight_decay(p.slice));
  }
  // The tables' capacity as the memory model prices it (model/memory.cc): a segment per tensor at
  // most (ZeRO's parts are pieces of them, merged runs fewer), over the whole chunk's elements.
  adam_ = be_.plan_adamw(segments, {.segments = static_cast<int64_t>(layout.buffer.slices().size()),
                                    .elements = layout.buffer.total()});
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

void* DistributedOptimizer::model_read(int64_t at) const {
  void* base = act_bytes_ == 4 ? static_cast<void*>(model_.params().data())
                               : static_cast<void*>(model_.read_copy());
  return static_cast<char*>(base) + at * act_bytes_;
}

const void* DistributedOptimizer::shard_read(int64_t at) const {
  const void* base =
      act_bytes_ == 4 ? static_cast<const void*>(master_) : static_cast<const void*>(master16_);
  return static_cast<const char*>(base) + at * act_bytes_;
}

void DistributedOptimizer::init(uint64_t seed) {
  if (zero_ == 0) {
    model_.init(seed);
    return;
  }
  // Only this rank's parts, into the master shard (1/dp of the work, and ZeRO 3 never has the
  // full weights resident); ZeRO 1/2 then gather the model's read weights.
  std::vector<float> host;
  for (const OwnedPart& p :
       zero_owned_parts(model_.param_layout(), zero_, dp_->size(), dp_->rank())) {
    if (be_.host_memory()) {
      model_.init_part(p.slice, seed, p.begin, p.n, master_ + p.at);
    } else {
      host.resize(static_cast<size_t>(p.n));
      model_.init_part(p.slice, seed, p.begin, p.n, host.data());
      be_.upload(master_ + p.at, host.data(), p.n * 4);
    }
  }
  if (master16_ != nullptr) {
    be_.convert(reinterpret_cast<kernels::Act*>(master16_), master_, shard_elements_);
  }
  if (zero_ <= 2) gather_all();
}

const void* DistributedOptimizer::gather(int u) {
  if (zero_ < 3) return model_read(unit(u).begin);
  if (param_slot_[u] == nullptr) {
    const UnitShard& sh = shards_[u];
    // The all-gather writes all of it.
    param_slot_[u] = pool_->acquire(padded(u) * act_bytes_, /*zeroed=*/false);
    const comm::Payload p = read_payload(sh.size);
    dp_->all_gather_async(param_slot_[u], shard_read(sh.at), p.count, p.type).order();
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
  if (grad_slot_[u] == nullptr) {
    // The pass's gradients add to zeros, including the padding the reduce-scatter reads past the
    // unit's last element; except this rank's block once a pass of this step has reduced the unit
    // (backward_done completed it): there they add to the step's reduced sum so far, so the
    // reduce-scatter writes the new sum straight into the shard. With dp = 1 this is, by
    // construction, the accumulation of a ZeRO-0 buffer.
    float* g = static_cast<float*>(pool_->acquire(padded(u) * 4, /*zeroed=*/false));
    const UnitShard& sh = shards_[u];
    if (shard_started_[u]) {
      be_.zero(g, sh.begin * 4);
      be_.copy(g + sh.begin, grad_shard_ + sh.at, sh.size * 4);
      be_.zero(g + sh.begin + sh.size, (padded(u) - sh.begin - sh.size) * 4);
    } else {
      be_.zero(g, padded(u) * 4);
    }
    grad_slot_[u] = g;
  }
  return grad_slot_[u];
}

void DistributedOptimizer::grads_ready(int u) {
  if (zero_ <= 1 && !final_pass_) return;  // accumulate until the last microbatch
  if (zero_ == 0 && dp_->size() == 1) return;
  // Backward calls here once per unit: the chance to progress what is in flight (MPI advances
  // nonblocking collectives only inside MPI calls). A bounded number in flight: each holds the MPI
  // library's temporaries (and, from ZeRO 2 on, a unit's full gradient pages) until it completes.
  for (Pending& p : pending_) p.work.test();
  if (pending_.size() >= static_cast<size_t>(kZeroBucketsInFlight)) complete_oldest();
  float* g = grads(u);  // the collective starts after the backward's writes of g (comm::Work)
  if (zero_ == 0) {
    pending_.push_back(
        {u, dp_->all_reduce_async(g, unit(u).numel(), comm::DataType::F32, comm::ReduceOp::Sum)});
    return;
  }
  // Straight into the shard: ZeRO 1's one reduction; ZeRO 2/3's every pass, whose gradients
  // already hold the step's earlier sum in this rank's block (grads()).
  const UnitShard& sh = shards_[u];
  shard_started_[u] = true;
  pending_.push_back(
      {u, dp_->reduce_scatter_async(grad_shard_ + sh.at, g, sh.size, comm::DataType::F32)});
}

// Waits for the oldest reduction in flight. ZeRO 2/3: the unit's full gradient goes back to the
// pool (the next pass takes a buffer afresh).
void DistributedOptimizer::complete_oldest() {
  Pending p = std::move(pending_.front());
  pending_.erase(pending_.begin());
  const auto t0 = std::chrono::steady_clock::now();
  p.work.order();
  wait_seconds_ += seconds_since(t0);
  if (zero_ < 2) return;
  pool_->release(grad_slot_[p.unit]);
  grad_slot_[p.unit] = nullptr;
}

void DistributedOptimizer::backward_done() {
  // ZeRO 2/3: the next pass adds into the same units, so nothing of them may still be in flight.
  // ZeRO 0/1 reduce after the last pass only: their reductions may run on into other chunks'
  // passes.
  if (zero_ >= 2) finish_reduction();
}

void DistributedOptimizer::finish_reduction() {
  while (!pending_.empty()) complete_oldest();
}

double DistributedOptimizer::time_reductions_alone(int microbatches) {
  if (zero_ == 0 && dp_->size() == 1) return 0;
  const int passes = zero_ >= 2 ? microbatches : 1;
  dp_->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  const int units = static_cast<int>(model_.param_layout().units.size());
  for (int k = 0; k < passes; ++k) {
    for (int u = 0; u < units; ++u) {
      float* g = grads(u);  // ZeRO 2/3: a pool buffer, as a backward pass would take
      if (zero_ == 0) {
        dp_->all_reduce(g, unit(u).numel());
      } else {
        dp_->reduce_scatter(grad_shard_ + shards_[u].at, g, shards_[u].size);
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
  // Each gather starts after AdamW's writes of the shard (comm::Work).
  std::vector<comm::Work> works;  // a bounded number in flight, as the reductions
  for (size_t u = 0; u < shards_.size(); ++u) {
    if (works.size() >= static_cast<size_t>(kZeroBucketsInFlight)) {
      works.front().order();
      works.erase(works.begin());
    }
    const UnitShard& sh = shards_[u];
    const comm::Payload p = read_payload(sh.size);
    works.push_back(dp_->all_gather_async(model_read(unit(static_cast<int>(u)).begin),
                                          shard_read(sh.at), p.count, p.type));
  }
  for (auto& w : works) w.order();
}

void DistributedOptimizer::step(float lr, float grad_scale) {
  ++t_;
  be_.order_after_downloads();  // a checkpoint's snapshot of the state in flight (snapshot_state)
  adam_->step(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, t_, grad_scale);
  if (zero_ == 1 || zero_ == 2) gather_all();
  // Accumulated afresh over the next step's microbatches: each unit's first reduction overwrites
  // its range of the shard.
  if (zero_ >= 2) shard_started_.assign(shard_started_.size(), false);
}

DistributedOptimizer::StateView DistributedOptimizer::state() { return {state_group(0), m_, v_}; }

float* DistributedOptimizer::state_group(int group) {
  WEFT_CHECK(group >= 0 && group < 3, "state group ", group, " is not 0, 1 or 2");
  if (group == 1) return m_;
  if (group == 2) return v_;
  return zero_ == 0 ? model_.params().data() : master_;
}

int64_t DistributedOptimizer::state_floats() const {
  return zero_ == 0 ? model_.param_layout().buffer.total() : shard_elements_;
}

void DistributedOptimizer::snapshot_state(int group, float* out) {
  be_.download_async(out, state_group(group), state_floats() * 4);
}

void DistributedOptimizer::read_state(int group, int64_t at, int64_t n, float* out) {
  const int64_t size = state_floats();
  WEFT_CHECK(at >= 0 && n >= 0 && at + n <= size, "read_state: group ", group, " elements [", at,
             ", ", at + n, ") of ", size);
  be_.download(out, state_group(group) + at, n * 4);
}

void DistributedOptimizer::write_state(int group, int64_t at, int64_t n, const float* in) {
  const int64_t size = state_floats();
  WEFT_CHECK(at >= 0 && n >= 0 && at + n <= size, "write_state: group ", group, " elements [", at,
             ", ", at + n, ") of ", size);
  be_.upload(state_group(group) + at, in, n * 4);
}

void DistributedOptimizer::state_loaded(int step_count) {
  t_ = step_count;
  // The bf16 copies of what was loaded (BF16Mixed).
  if (zero_ == 0) {
    model_.refresh_read_copy(0, model_.param_layout().buffer.total());
  } else if (master16_ != nullptr) {
    be_.convert(reinterpret_cast<kernels::Act*>(master16_), master_, shard_elements_);
  }
  if (zero_ == 1 || zero_ == 2) {
    gather_all();  // the model's read weights from every rank's master shard
  } else if (zero_ == 3) {
    for (int u = 0; u < static_cast<int>(param_slot_.size()); ++u) release(u);  // gathered anew
  }
}

}  // namespace weft::optim
