#pragma once
// Comparing parameters or gradients gathered into the serial layout (model::gpt_param_layout(cfg)),
// as the equivalence tests do: over the whole model, and tensor by tensor, each with its own
// bound. Set both bounds from a measurement (a small multiple of the difference the layout shows
// when the code is right) and check that a planted bug breaks them: a per-tensor bound is there
// to catch one tensor going wrong while the rest hide it in the global norm.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "support/rel_error.h"
#include "weft/model/param_layout.h"

namespace weft::test {

struct ParamTolerance {
  double all;         // relative L2 over every compared element
  double per_tensor;  // relative L2 of each tensor on its own
};

// How far `actual` is from `expected`: over everything, and the worst tensor.
struct ParamErrors {
  double all = 0;
  double worst_tensor = 0;
  std::string worst_name;
  std::vector<std::pair<std::string, double>> per_tensor;  // every tensor's relative L2
};

// The relative L2 errors of `actual` against `expected` (both in `global`'s layout). Left out is
// the attention key bias: its gradient is zero in exact arithmetic (adding q.b_k to every score of
// a softmax row changes nothing), so its value after training is rounding noise alone, and so is
// its gradient. The query and value biases are compared.
inline ParamErrors param_errors(const model::ParamLayout& global, const float* actual,
                                const float* expected, int64_t n_embd) {
  ParamErrors e;
  std::vector<float> all_p, all_q;
  for (const SliceSpec& s : global.buffer.slices()) {
    std::vector<float> p(actual + s.offset, actual + s.offset + s.numel);
    std::vector<float> q(expected + s.offset, expected + s.offset + s.numel);
    if (s.name.ends_with("attn.qkv.bias")) {  // [q: C | k: K | v: K], K = NKV*HS
      const int64_t k = (s.numel - n_embd) / 2;
      p.erase(p.begin() + n_embd, p.begin() + n_embd + k);
      q.erase(q.begin() + n_embd, q.begin() + n_embd + k);
    }
    const double r = rel_error(p, q);
    e.per_tensor.emplace_back(s.name, r);
    if (!(r <= e.worst_tensor)) {  // NaN-safe: a non-finite error is always the worst
      e.worst_tensor = r;
      e.worst_name = s.name;
    }
    all_p.insert(all_p.end(), p.begin(), p.end());
    all_q.insert(all_q.end(), q.begin(), q.end());
  }
  e.all = rel_error(all_p, all_q);
  return e;
}

// Every tensor within tol.per_tensor and the whole within tol.all (relative L2). Returns the
// errors, so that a test can also print what it measured.
inline ParamErrors expect_params_close(const model::ParamLayout& global, const float* actual,
                                       const float* expected, int64_t n_embd, ParamTolerance tol,
                                       const std::string& context) {
  ParamErrors e = param_errors(global, actual, expected, n_embd);
  for (const auto& [name, r] : e.per_tensor) {
    EXPECT_LE(r, tol.per_tensor) << name << " " << context << ": relative L2 " << r
                                 << " against a per-tensor tolerance of " << tol.per_tensor;
  }
  EXPECT_LE(e.all, tol.all) << "all parameters, " << context << " (worst tensor " << e.worst_name
                            << " at " << e.worst_tensor << ")";
  return e;
}

}  // namespace weft::test
