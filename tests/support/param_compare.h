#pragma once
// Comparing parameters gathered into the serial layout (model::gpt_param_layout(cfg)), as the
// equivalence tests do.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "support/rel_error.h"
#include "weft/model/param_layout.h"

namespace weft::test {

// `actual` within `tol` of `expected` (both in `global`'s layout) in relative L2 over all
// parameters, and every tensor within 10 * tol in relative L2 or, failing that, elementwise
// absolute. Adam moves an element whose gradient is mostly rounding noise by up to lr whatever its
// size, which a tensor that starts at zero (a bias) cannot hide in a relative bound, nor a small
// matrix in an elementwise one; over the whole model that noise is far below tol. Left out is the
// attention key bias: its gradient is zero in exact arithmetic (adding q.b_k to every score of a
// softmax row changes nothing), so it is noise alone. The query and value biases are compared.
inline void expect_params_close(const model::ParamLayout& global, const float* actual,
                                const float* expected, int64_t n_embd, double tol,
                                const std::string& context) {
  std::vector<float> all_p, all_q;
  for (const SliceSpec& s : global.buffer.slices()) {
    std::vector<float> p(actual + s.offset, actual + s.offset + s.numel);
    std::vector<float> q(expected + s.offset, expected + s.offset + s.numel);
    if (s.name.ends_with("attn.qkv.bias")) {
      p.erase(p.begin() + n_embd, p.begin() + 2 * n_embd);
      q.erase(q.begin() + n_embd, q.begin() + 2 * n_embd);
    }
    double worst = 0;
    for (size_t i = 0; i < p.size(); ++i) worst = std::max(worst, std::abs(double(p[i]) - q[i]));
    EXPECT_TRUE(rel_error(p, q) <= 10 * tol || worst <= 10 * tol)
        << s.name << " " << context << ": relative L2 " << rel_error(p, q)
        << ", largest difference " << worst << ", tolerance " << 10 * tol;
    all_p.insert(all_p.end(), p.begin(), p.end());
    all_q.insert(all_q.end(), q.begin(), q.end());
  }
  EXPECT_LE(rel_error(all_p, all_q), tol) << "all parameters, " << context;
}

}  // namespace weft::test
