#pragma once
// AdamW over a flat parameter buffer (Loshchilov & Hutter 2019, decoupled weight decay), with its
// two moments in flat buffers of the same layout, and global-norm gradient clipping. The trainer's
// optimizer is optim::DistributedOptimizer (any backend, ZeRO 0-3, through Backend::plan_adamw);
// this serial one is the host kernel (kernels::cpu::adamw_update) over a whole model, for the
// serial checkpoint API and the tests that train one model::Gpt by hand.

#include <cstdint>
#include <vector>

#include "weft/tensor/flat_buffer.h"

namespace weft::optim {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class AdamW {
 public:
  // A contiguous run of elements sharing the weight-decay decision: one kernel call each.
  struct Run {
    int64_t offset = 0, numel = 0;
    bool weight_decay = false;
  };

  // decay[i]: whether slice i of the layout gets weight decay (matrices and embeddings do;
  // biases and LayerNorm parameters do not).
  AdamW(const BufferLayout& layout, const std::vector<bool>& decay, AdamWConfig cfg = {});

  // One update with learning rate lr; increments the step count first (bias correction uses t>=1).
  // params and grads are laid out like the moments.
  void step(float* params, const float* grads, float lr);
  void step(FlatBuffer& params, const FlatBuffer& grads, float lr) {
    step(params.data(), grads.data(), lr);
  }

  int step_count() const { return t_; }
  void set_step_count(int t) { t_ = t; }
  FlatBuffer& m() { return m_; }
  FlatBuffer& v() { return v_; }
  const FlatBuffer& m() const { return m_; }
  const FlatBuffer& v() const { return v_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  AdamWConfig cfg_;
  std::vector<Run> runs_;
  FlatBuffer m_, v_;
  int t_ = 0;
};

// The factor clipping applies: max_norm / norm when the norm is finite and exceeds max_norm > 0,
// else 1. (finish_step sums the norm over the ranks and scales each optimizer's gradient parts.)
float clip_factor(double norm, double max_norm);

}  // namespace weft::optim
