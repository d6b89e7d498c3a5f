// AdamW over flat buffers against a scalar double-precision reference written here, and global
// gradient-norm clipping.

#include "weft/optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "weft/core/check.h"
#include "weft/tensor/flat_buffer.h"

namespace weft::optim {
namespace {

// One parameter element's AdamW state, updated the textbook way (Loshchilov & Hutter, Alg. 2,
// with bias-corrected moments and decoupled weight decay scaled by the learning rate).
struct ScalarAdamW {
  double p = 0, m = 0, v = 0;
  void step(double g, double lr, int t, const AdamWConfig& c, bool decay) {
    m = c.beta1 * m + (1 - c.beta1) * g;
    v = c.beta2 * v + (1 - c.beta2) * g * g;
    const double m_hat = m / (1 - std::pow(double{c.beta1}, t));
    const double v_hat = v / (1 - std::pow(double{c.beta2}, t));
    const double wd = decay ? c.weight_decay : 0.0;
    p -= lr * (m_hat / (std::sqrt(v_hat) + c.eps) + wd * p);
  }
};

// Matrices decay, vectors do not; two adjacent no-decay slices exercise run merging.
BufferLayout test_layout() {
  BufferLayout layout;
  layout.add("wte", {5, 7});
  layout.add("ln.w", {7});
  layout.add("ln.b", {7});
  layout.add("fc.w", {3, 4});
  layout.add("fc.b", {4});
  return layout;
}
const std::vector<bool> kDecay = {true, false, false, true, false};

// Fills the slices (not the padding) of `buf` with uniform values in [lo, hi).
void fill_slices(FlatBuffer& buf, std::mt19937& gen, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for (const auto& s : buf.layout().slices()) {
    for (int64_t i = 0; i < s.numel; ++i) buf.data()[s.offset + i] = dist(gen);
  }
}

// Runs `steps` AdamW steps on both the class and the scalar reference and compares every element.
void expect_matches_reference(const AdamWConfig& cfg, int steps, int first_t) {
  const BufferLayout layout = test_layout();
  FlatBuffer params(layout), grads(layout);
  std::mt19937 gen(17);
  fill_slices(params, gen, -1.0f, 1.0f);

  std::vector<ScalarAdamW> ref(static_cast<size_t>(layout.total()));
  for (int64_t i = 0; i < layout.total(); ++i) ref[static_cast<size_t>(i)].p = params.data()[i];
  std::vector<bool> decay_of(static_cast<size_t>(layout.total()), false);
  std::vector<bool> live(static_cast<size_t>(layout.total()), false);
  for (size_t k = 0; k < layout.slices().size(); ++k) {
    const auto& s = layout.slices()[k];
    for (int64_t i = 0; i < s.numel; ++i) {
      decay_of[static_cast<size_t>(s.offset + i)] = kDecay[k];
      live[static_cast<size_t>(s.offset + i)] = true;
    }
  }

  AdamW opt(layout, kDecay, cfg);
  opt.set_step_count(first_t - 1);
  for (int step = 0; step < steps; ++step) {
    fill_slices(grads, gen, -0.5f, 0.5f);
    const float lr = 1e-2f * static_cast<float>(step + 1);  // a changing learning rate
    opt.step(params, grads, lr);
    ASSERT_EQ(opt.step_count(), first_t + step);
    for (int64_t i = 0; i < layout.total(); ++i) {
      auto& r = ref[static_cast<size_t>(i)];
      r.step(grads.data()[i], lr, first_t + step, cfg, decay_of[static_cast<size_t>(i)]);
      const double tol = 1e-5 * (1 + std::abs(r.p));
      ASSERT_NEAR(params.data()[i], r.p, tol) << "step " << step << " element " << i;
      ASSERT_NEAR(opt.m().data()[i], r.m, 1e-6) << "step " << step << " element " << i;
      ASSERT_NEAR(opt.v().data()[i], r.v, 1e-7) << "step " << step << " element " << i;
      if (!live[static_cast<size_t>(i)]) {
        ASSERT_EQ(params.data()[i], 0.0f) << "padding element " << i << " changed";
        ASSERT_EQ(opt.m().data()[i], 0.0f) << "padding element " << i << " changed";
      }
    }
  }
}

TEST(AdamW, MatchesTheScalarReferenceOverSeveralSteps) {
  expect_matches_reference(AdamWConfig{}, 6, 1);
}

TEST(AdamW, MatchesTheScalarReferenceWithOtherHyperparameters) {
  expect_matches_reference(
      AdamWConfig{.beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.5f}, 5, 1);
}

TEST(AdamW, BiasCorrectionUsesTheRestoredStepCount) {
  expect_matches_reference(AdamWConfig{}, 3, 100);  // as after loading a checkpoint at step 99
}

TEST(AdamW, FirstStepMovesEachParameterByAboutTheLearningRate) {
  // With bias correction, step 1 gives m_hat / sqrt(v_hat) = g / |g| = sign(g).
  BufferLayout layout;
  layout.add("b", {4});
  FlatBuffer params(layout), grads(layout);
  const float g[] = {0.001f, -3.0f, 250.0f, -1e-3f};
  for (int i = 0; i < 4; ++i) grads.data()[i] = g[i];
  AdamW opt(layout, {false});
  opt.step(params, grads, 0.1f);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(params.data()[i], g[i] > 0 ? -0.1f : 0.1f, 1e-5f) << i;
  }
}

TEST(AdamW, DecaysOnlyTheSlicesFlaggedForWeightDecay) {
  const BufferLayout layout = test_layout();
  FlatBuffer params(layout), grads(layout);  // zero gradients: only weight decay acts
  for (const auto& s : layout.slices()) {
    for (int64_t i = 0; i < s.numel; ++i) params.data()[s.offset + i] = 2.0f;
  }
  AdamW opt(layout, kDecay, AdamWConfig{.weight_decay = 0.1f});
  opt.step(params, grads, 0.5f);
  for (size_t k = 0; k < layout.slices().size(); ++k) {
    const auto& s = layout.slices()[k];
    const float expected = kDecay[k] ? 2.0f * (1 - 0.5f * 0.1f) : 2.0f;
    for (int64_t i = 0; i < s.numel; ++i) {
      ASSERT_FLOAT_EQ(params.data()[s.offset + i], expected) << s.name << "[" << i << "]";
    }
  }
}

TEST(AdamW, CountsSteps) {
  const BufferLayout layout = test_layout();
  FlatBuffer params(layout), grads(layout);
  AdamW opt(layout, kDecay);
  EXPECT_EQ(opt.step_count(), 0);
  opt.step(params, grads, 1e-3f);
  opt.step(params, grads, 1e-3f);
  EXPECT_EQ(opt.step_count(), 2);
  opt.set_step_count(41);
  opt.step(params, grads, 1e-3f);
  EXPECT_EQ(opt.step_count(), 42);
}

TEST(AdamW, StartsWithZeroMomentsOfTheParameterLayout) {
  const BufferLayout layout = test_layout();
  AdamW opt(layout, kDecay);
  ASSERT_EQ(opt.m().size(), layout.total());
  ASSERT_EQ(opt.v().size(), layout.total());
  EXPECT_EQ(opt.m().layout().at("fc.w").offset, layout.at("fc.w").offset);
  for (int64_t i = 0; i < layout.total(); ++i) {
    ASSERT_EQ(opt.m().data()[i], 0.0f);
    ASSERT_EQ(opt.v().data()[i], 0.0f);
  }
  EXPECT_EQ(opt.config().beta2, 0.95f);
}

TEST(AdamW, RejectsDecayFlagsOfTheWrongLength) {
  EXPECT_THROW(AdamW(test_layout(), {true, false}), Error);
}

// Clipping scales the gradients by max_norm / norm when the global norm (summed over the ranks
// by finish_step) exceeds max_norm; never otherwise.
TEST(ClipFactor, ScalesDownToMaxNormOnlyWhenAFiniteNormExceedsIt) {
  EXPECT_NEAR(clip_factor(5.0, 1.0), 0.2, 1e-6);
  EXPECT_EQ(clip_factor(5.0, 10.0), 1.0f);
  EXPECT_EQ(clip_factor(5.0, 5.0), 1.0f);
  for (double max_norm : {0.0, -1.0}) EXPECT_EQ(clip_factor(5.0, max_norm), 1.0f);
  EXPECT_EQ(clip_factor(std::numeric_limits<double>::infinity(), 1.0), 1.0f);
  EXPECT_EQ(clip_factor(std::nan(""), 1.0), 1.0f);
}

}  // namespace
}  // namespace weft::optim
