#include <cstdint>

#include <fmt/format.h>

#include "weft/schedule/generators.h"
#include "weft/schedule/schedule.h"

namespace weft::schedule {
namespace {
// Far beyond any real pipeline; keeps pp*vp*m inside int and the programs in memory.
constexpr std::int64_t kMaxStageMicrobatches = 1'000'000;
}  // namespace

Status check_sizes(const Shape& shape) {
  Status status;
  const int pp = shape.pp, vp = shape.vp, m = shape.microbatches;
  if (pp < 1) status.add(fmt::format("pp={} must be at least 1", pp));
  if (vp < 1) status.add(fmt::format("vp={} must be at least 1", vp));
  if (m < 1) status.add(fmt::format("microbatches={} must be at least 1", m));
  if (status.ok() && std::int64_t{pp} * vp * m > kMaxStageMicrobatches) {
    status.add(fmt::format("pp*vp*microbatches={} exceeds {} (stage, microbatch) pairs",
                           std::int64_t{pp} * vp * m, kMaxStageMicrobatches));
  }
  return status;
}

Status check_shape(Kind kind, const Shape& shape) {
  Status status = check_sizes(shape);
  const int pp = shape.pp, vp = shape.vp, m = shape.microbatches;
  const std::string_view name = kind_name(kind);
  if (kind == Kind::Interleaved) {
    if (vp == 1) {
      status.add("interleaved needs vp >= 2 model chunks per rank (with vp=1 it is 1f1b)");
    }
    // Megatron's interleaved order runs microbatches in groups of pp through each chunk
    // (Narayanan et al., SC'21, §2.2.2), so m must split into whole groups.
    if (pp >= 1 && m >= 1 && m % pp != 0) {
      const int below = m / pp * pp, above = below + pp;
      status.add(fmt::format(
          "interleaved needs microbatches to be a multiple of pp: microbatches={} is not "
          "divisible by pp={} (try {})",
          m, pp, below == 0 ? fmt::format("{}", above) : fmt::format("{} or {}", below, above)));
    }
  } else if (vp > 1) {
    status.add(fmt::format("vp={} model chunks per rank needs kind interleaved, not {}", vp, name));
  }
  if (kind != Kind::GPipe && pp >= 1 && m >= 1 && m < pp) {
    // With m < pp there is no steady state: 1F1B degenerates to GPipe and the bubble exceeds
    // the useful work, (pp-1)/m > 1.
    status.add(fmt::format(
        "{} needs at least as many microbatches as pipeline ranks: microbatches={} < pp={} "
        "(use gpipe, or more microbatches)",
        name, m, pp));
  }
  return status;
}

Result<Schedule> make_schedule(Kind kind, const Shape& shape) {
  Status status = check_shape(kind, shape);
  if (!status.ok()) return status;
  // 1F1B and ZB-H1 are one generator: ZB-H1 splits each backward into I and W.
  std::vector<Program> programs =
      kind == Kind::GPipe         ? detail::gpipe_programs(shape)
      : kind == Kind::Interleaved ? detail::interleaved_programs(shape)
                                  : detail::one_f_one_b_programs(shape, kind == Kind::ZeroBubbleH1);
  return Schedule{.kind = kind, .shape = shape, .programs = std::move(programs)};
}

}  // namespace weft::schedule
