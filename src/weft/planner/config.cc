#include "weft/planner/config.h"

#include <fmt/format.h>

#include "weft/core/suggest.h"
#include "weft/parallel/topology.h"
#include "weft/schedule/schedule.h"

namespace weft::planner {

std::string_view precision_name(Precision p) {
  return p == Precision::FP32 ? "fp32" : "bf16-mixed";
}

Result<Precision> parse_precision(std::string_view name) {
  for (Precision p : {Precision::FP32, Precision::BF16Mixed}) {
    if (precision_name(p) == name) return p;
  }
  return Status::error(fmt::format("unknown precision '{}'{}: fp32 or bf16-mixed", name,
                                   did_you_mean(name, {"fp32", "bf16-mixed"})));
}

PrecisionBytes precision_bytes(Precision p) {
  if (p == Precision::FP32) return {.weight = 4, .grad = 4, .optimizer = 8, .activation = 4};
  return {.weight = 2, .grad = 4, .optimizer = 12, .activation = 2};  // bf16-mixed
}

Status validate(const Job& job) {
  Status s = model::validate_for_run(job.model, job.seq_len);
  if (job.global_batch <= 0) s.add(fmt::format("global batch {} must be > 0", job.global_batch));
  if (job.world <= 0) s.add(fmt::format("world {} must be > 0", job.world));
  if (job.tokens < 0) s.add(fmt::format("tokens {} must be >= 0", job.tokens));
  return s;
}

Status validate(const layout::Layout& c, const Job& job) {
  // The trainer's rules (layout/validate.h): nothing the planner ranks is refused by `weft train`.
  Status s =
      layout::validate(job.model, c, {.global_batch = job.global_batch, .seq_len = job.seq_len});
  // The world: the trainer's process-grid check (parallel::validate), once the sizes are sane.
  if (c.tp >= 1 && c.pp >= 1 && c.dp >= 1) s.merge(parallel::validate(c.grid(), job.world));
  return s;
}

}  // namespace weft::planner
