#pragma once
// What the CPU equivalence tests (tests/parallel/) compare between a parallel run and the serial
// one, beyond the losses: the gradient norm at every step (Adam with clipping hardly sees the
// gradients' scale, so a doubled gradient leaves the losses alone but not the norm), one step's
// gradients tensor by tensor, and the final parameters, both gathered into the serial layout.
// Each layout's tolerances are a small multiple of what it measured when the code is right, so
// expect_runner_equals_serial prints what it measured.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "support/param_compare.h"
#include "support/shards.h"
#include "support/train_step.h"
#include "weft/model/gpt.h"
#include "weft/optim/shards.h"
#include "weft/runtime/pipeline_runner.h"

namespace weft::test {

// Step s's tokens, [microbatches, B, T] plus one: the targets are the same shifted by one.
using StepTokens = std::function<std::vector<int32_t>(int step)>;

constexpr float kEquivalenceLr = 1e-3f;
constexpr double kEquivalenceClip = 1.0;

struct SerialRun {
  std::vector<float> losses;
  std::vector<double> grad_norms;  // before clipping
  std::vector<float> grads;        // step grad_step's, before clipping (serial layout)
  std::vector<float> params;       // after the last step
};

// `steps` AdamW steps of the serial model over `microbatches` [B, T] blocks each.
inline SerialRun train_serial(const model::GptConfig& cfg, uint64_t seed, int B, int T,
                              int microbatches, int steps, int grad_step,
                              const StepTokens& tokens) {
  model::Gpt g(cfg, B, T);
  g.init(seed);
  optim::DistributedOptimizer opt(g, nullptr, 0);
  SerialRun r;
  for (int s = 0; s < steps; ++s) {
    const std::vector<int32_t> t = tokens(s);
    const auto keep_grads = [&] {
      r.grads.assign(g.grads().data(), g.grads().data() + g.grads().size());
    };
    const runtime::StepStats st =
        test::train_step(g, opt, t.data(), t.data() + 1, B, T, microbatches, kEquivalenceLr,
                         kEquivalenceClip, s == grad_step ? keep_grads : runtime::BeforeUpdate{});
    r.losses.push_back(st.loss);
    r.grad_norms.push_back(st.grad_norm);
  }
  r.params.assign(g.params().data(), g.params().data() + g.params().size());
  return r;
}

// A PipelineRunner's parts in the serial layout, on every rank of the replica (`model`: its tp x
// pp ranks, null for one). `part_data(opt, i, part)` gives the data of part i of a chunk's
// optim::zero_owned_parts: ZeRO 0 every slice whole, the same on every replica; ZeRO >= 1 this
// rank's parts, so the replicas' parts are summed over `dp`.
inline std::vector<float> gather_runner(
    const runtime::PipelineRunner& runner, comm::Communicator* dp, comm::Communicator* model,
    const std::function<const float*(optim::DistributedOptimizer&, size_t,
                                     const optim::OwnedPart&)>& part_data) {
  const model::ParamLayout global = model::gpt_param_layout(runner.chunks()[0]->config());
  std::vector<float> all(global.buffer.total(), 0.0f);
  const int dp_size = dp != nullptr ? dp->size() : 1, dp_rank = dp != nullptr ? dp->rank() : 0;
  for (size_t j = 0; j < runner.chunks().size(); ++j) {
    const model::Gpt& c = *runner.chunks()[j];
    const model::ParamLayout& layout = c.param_layout();
    optim::DistributedOptimizer& opt = *runner.optimizers()[j];
    std::vector<float> p(layout.buffer.total(), 0.0f);
    const std::vector<optim::OwnedPart> parts =
        optim::zero_owned_parts(layout, opt.zero(), dp_size, dp_rank);
    for (size_t i = 0; i < parts.size(); ++i) {
      std::copy_n(part_data(opt, i, parts[i]), parts[i].n,
                  p.data() + layout.buffer.slices()[parts[i].slice].offset + parts[i].begin);
    }
    if (opt.zero() > 0 && dp != nullptr) dp->all_reduce(p.data(), static_cast<int64_t>(p.size()));
    place_shards(layout, c.stage(), p.data(), global, all.data());
  }
  if (model != nullptr) model->all_reduce(all.data(), static_cast<int64_t>(all.size()));
  return all;
}

// The parameters: each optimizer's (ZeRO: its fp32 master shard's).
inline std::vector<float> runner_params(const runtime::PipelineRunner& runner,
                                        comm::Communicator* dp, comm::Communicator* model) {
  return gather_runner(runner, dp, model,
                       [](optim::DistributedOptimizer& opt, size_t, const optim::OwnedPart& p) {
                         return opt.state().params + p.at;
                       });
}

// The gradients the optimizers work on (grad_parts(): whole, or ZeRO this rank's reduced shard),
// read inside a step's BeforeUpdate.
inline std::vector<float> runner_grads(const runtime::PipelineRunner& runner,
                                       comm::Communicator* dp, comm::Communicator* model) {
  return gather_runner(runner, dp, model,
                       [](optim::DistributedOptimizer& opt, size_t i, const optim::OwnedPart&) {
                         return static_cast<const float*>(opt.grad_parts()[i].grad);
                       });
}

// Each step's value within `tol` relative of the serial run's. Returns the largest relative
// difference.
template <typename A, typename E>
double expect_steps_close(const std::vector<A>& actual, const std::vector<E>& expected, double tol,
                          const std::string& what) {
  EXPECT_EQ(actual.size(), expected.size()) << what;
  double worst = 0;
  for (size_t s = 0; s < actual.size() && s < expected.size(); ++s) {
    const double a = actual[s], e = expected[s];
    const double r = std::abs(a - e) / std::abs(e);
    if (!(r <= worst)) worst = r;  // NaN-safe
    EXPECT_LE(r, tol) << what << " at step " << s << ": " << a << " against the serial " << e
                      << " (relative " << r << ")";
  }
  return worst;
}

struct EquivalenceTolerance {
  double loss;       // relative, at every step
  double grad_norm;  // relative, at every step
  ParamTolerance grads;
  ParamTolerance params;
};

// Trains `runner` (initialized as the serial model) for as many steps as `serial` took, on
// `tokens(step)` (this replica's part of the step's batch), and compares with `serial`: every
// loss and gradient norm, step grad_step's gradients and the final parameters. With `print` (one
// rank's), prints what it measured: the figures the tolerances are set from.
inline void expect_runner_equals_serial(runtime::PipelineRunner& runner, comm::Communicator* dp,
                                        comm::Communicator* model, const SerialRun& serial,
                                        int grad_step, const StepTokens& tokens,
                                        const EquivalenceTolerance& tol, const std::string& context,
                                        bool print) {
  std::vector<float> losses, grads;
  std::vector<double> grad_norms;
  for (int s = 0; s < static_cast<int>(serial.losses.size()); ++s) {
    const std::vector<int32_t> t = tokens(s);
    const auto keep_grads = [&] { grads = runner_grads(runner, dp, model); };
    const runtime::StepStats st =
        runner.step(t.data(), t.data() + 1, kEquivalenceLr, kEquivalenceClip,
                    s == grad_step ? keep_grads : runtime::BeforeUpdate{});
    losses.push_back(st.loss);
    grad_norms.push_back(st.grad_norm);
  }
  const double loss = expect_steps_close(losses, serial.losses, tol.loss, "loss, " + context);
  const double norm =
      expect_steps_close(grad_norms, serial.grad_norms, tol.grad_norm, "grad_norm, " + context);
  const model::GptConfig& cfg = runner.chunks()[0]->config();
  const model::ParamLayout global = model::gpt_param_layout(cfg);
  const ParamErrors g =
      expect_params_close(global, grads.data(), serial.grads.data(), cfg.n_embd, tol.grads,
                          "gradients of step " + std::to_string(grad_step) + ", " + context);
  const std::vector<float> params = runner_params(runner, dp, model);
  const ParamErrors p = expect_params_close(global, params.data(), serial.params.data(), cfg.n_embd,
                                            tol.params, "final parameters, " + context);
  if (print) {
    std::printf(
        "measured %s: loss %.2g, grad_norm %.2g, grads %.2g (worst %s %.2g), params %.2g (worst "
        "%s %.2g)\n",
        context.c_str(), loss, norm, g.all, g.worst_name.c_str(), g.worst_tensor, p.all,
        p.worst_name.c_str(), p.worst_tensor);
  }
}

}  // namespace weft::test
