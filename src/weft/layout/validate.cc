#include "weft/layout/validate.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "weft/model/param_layout.h"
#include "weft/schedule/schedule.h"

namespace weft::layout {

Status validate(const model::GptConfig& cfg, const Layout& l, const Batch& batch) {
  Status s;
  // Tensor parallelism: whole heads and vocabulary shards per rank; with sequence parallelism the
  // b*T rows of a microbatch split too.
  s.merge(model::validate_tensor_parallel(cfg, l.tp, l.sequence_parallel,
                                          l.micro_batch > 0 ? l.micro_batch : 0, batch.seq_len));
  if (l.dp < 1) s.add(fmt::format("parallel.dp={} must be >= 1", l.dp));
  // The pipeline: layers split into pp*vp equal stages.
  s.merge(model::validate_pipeline(cfg, l.pp, l.vp));
  if (l.micro_batch < 1) s.add(fmt::format("train.micro_batch={} must be > 0", l.micro_batch));
  if (batch.global_batch < 1)
    s.add(fmt::format("train.global_batch={} must be > 0", batch.global_batch));
  const bool sizes = l.tp >= 1 && l.pp >= 1 && l.dp >= 1 && l.vp >= 1 && l.micro_batch >= 1 &&
                     batch.global_batch >= 1;
  const int64_t b_dp = int64_t{l.micro_batch} * l.dp;  // sequences of one microbatch round
  const bool whole = sizes && batch.global_batch % b_dp == 0;
  if (sizes && !whole) {
    s.add(l.dp == 1 ? fmt::format("train.global_batch={} is not divisible by train.micro_batch={}",
                                  batch.global_batch, l.micro_batch)
                    : fmt::format("train.global_batch={} is not divisible by train.micro_batch={} "
                                  "x parallel.dp={}",
                                  batch.global_batch, l.micro_batch, l.dp));
  }
  const std::string_view name = schedule::kind_name(l.schedule);
  if (l.schedule == schedule::Kind::ZeroBubbleH1 && l.recompute == model::Recompute::Full) {
    s.add(
        "parallel.schedule='zb-h1' defers weight gradients, which needs each layer's inputs "
        "kept: train.recompute must be none or selective, not full");
  }
  if (whole) {
    const int m = l.microbatches(batch.global_batch);
    const schedule::Shape shape{.pp = l.pp, .vp = l.vp, .microbatches = m};
    const Status fits = schedule::check_shape(l.schedule, shape);
    for (const auto& problem : fits.problems()) {
      s.add(
          fmt::format("parallel.schedule='{}' with pp={} vp={} and {} microbatches "
                      "(train.global_batch / (micro_batch x dp)): {}",
                      name, l.pp, l.vp, m, problem));
    }
  }
  const bool zero_known = l.zero >= 0 && l.zero <= 3;
  if (!zero_known) s.add(fmt::format("parallel.zero={} must be 0, 1, 2 or 3", l.zero));

  return s;
}

}  // namespace weft::layout
