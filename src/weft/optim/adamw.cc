#include "weft/optim/adamw.h"

#include <cmath>

#include "weft/core/check.h"
#include "weft/kernels/kernels.h"

namespace weft::optim {

AdamW::AdamW(const BufferLayout& layout, const std::vector<bool>& decay, AdamWConfig cfg)
    : cfg_(cfg), m_(layout), v_(layout) {
  const auto& slices = layout.slices();
  WEFT_CHECK(decay.size() == slices.size(), "weight-decay flags for ", decay.size(),
             " slices, layout has ", slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    const int64_t end = slices[i].offset + slices[i].numel;
    if (!runs_.empty() && runs_.back().weight_decay == decay[i]) {
      runs_.back().numel = end - runs_.back().offset;  // padding in between stays zero
    } else {
      runs_.push_back({slices[i].offset, end - slices[i].offset, decay[i]});
    }
  }
}

void AdamW::step(float* params, const float* grads, float lr) {
  ++t_;
  for (const auto& g : runs_) {
    kernels::cpu::adamw_update(params + g.offset, grads + g.offset, m_.data() + g.offset,
                               v_.data() + g.offset, g.numel, lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                               g.weight_decay ? cfg_.weight_decay : 0.0f, t_);
  }
}

float clip_factor(double norm, double max_norm) {
  if (max_norm > 0 && norm > max_norm && std::isfinite(norm)) {
    return static_cast<float>(max_norm / (norm + 1e-6));
  }
  return 1.0f;
}

}  // namespace weft::optim
