#include "weft/runtime/gemm_ceiling.h"

#include <algorithm>

#include "weft/core/clock.h"
#include "weft/core/rng.h"
#include "weft/kernels/gemm.h"
#include "weft/tensor/aligned_buffer.h"

namespace weft::runtime {

namespace {
int64_t largest(const std::vector<model::GemmShape>& shapes, int64_t model::GemmShape::*m,
                int64_t model::GemmShape::*n) {
  int64_t most = 1;
  for (const auto& s : shapes) most = std::max(most, s.*m * s.*n);
  return most;
}
}  // namespace

GemmCeilingMeter::GemmCeilingMeter(std::vector<model::GemmShape> shapes)
    : shapes_(std::move(shapes)),
      a_(largest(shapes_, &model::GemmShape::M, &model::GemmShape::K)),
      b_(largest(shapes_, &model::GemmShape::K, &model::GemmShape::N)),
      out_(largest(shapes_, &model::GemmShape::M, &model::GemmShape::N)) {
  fill_normal(a_.data(), a_.size(), stream_key(1, "gemm.a"), 0, 0.0f, 1.0f);
  fill_normal(b_.data(), b_.size(), stream_key(1, "gemm.b"), 0, 0.0f, 1.0f);
  std::fill_n(out_.data(), out_.size(), 0.0f);
}

GemmCeiling GemmCeilingMeter::measure(int reps, kernels::MatmulPrecision precision) {
  const auto gemm =
      precision == kernels::MatmulPrecision::BF16 ? kernels::sgemm_bf16 : kernels::sgemm;
  float *a = a_.data(), *b = b_.data(), *out = out_.data();
  GemmCeiling c;
  for (const auto& s : shapes_) {
    const int64_t lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
    auto call = [&] {
      gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, a, lda, b, ldb, 1.0f, out, s.N);
    };
    // Calls run back to back in batches of at least kMinBatchSeconds, as they do inside a step:
    // timing single small calls would also time the OpenMP pool waking up from a passive wait,
    // and put the ceiling below what the step itself reaches.
    constexpr double kMinBatchSeconds = 0.005;
    auto t0 = SteadyClock::now();
    call();
    const double first = seconds_since(t0);
    const int calls = std::max(1, static_cast<int>(kMinBatchSeconds / std::max(first, 1e-7)));
    call();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      t0 = SteadyClock::now();
      for (int i = 0; i < calls; ++i) call();
      t.push_back(seconds_since(t0) / calls);
    }
    GemmTiming timing{s, median(t)};
    c.flops += s.flops();
    c.seconds += timing.seconds * s.count;
    c.timings.push_back(timing);
  }
  return c;
}

}  // namespace weft::runtime
