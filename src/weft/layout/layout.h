#pragma once
// THE layout of a job (issue 42: one type for the run config, the planner, the checkpoint
// metadata, validation and the runtime): how the model is split over ranks and how each rank runs
// its part. The process grid (tp x pp x dp, DESIGN.md §3) is parallel::GridShape, which the
// communicator groups are built from below the schedule and model modules; grid() is this
// layout's.

#include <string>
#include <string_view>

#include "weft/core/status.h"
#include "weft/model/recompute.h"
#include "weft/parallel/topology.h"
#include "weft/schedule/instr.h"

namespace weft::layout {

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  int vp = 1;           // model chunks per pipeline rank (the interleaved schedule)
  int micro_batch = 1;  // b, sequences per microbatch
  schedule::Kind schedule = schedule::Kind::OneFOneB;
  model::Recompute recompute = model::Recompute::None;
  bool sequence_parallel = false;
  int zero = 0;  // ZeRO stage 0-3 over the dp group (Rajbhandari et al. 2020)

  parallel::GridShape grid() const { return {.tp = tp, .pp = pp, .dp = dp}; }
  // m = B / (dp * b): microbatches per step on each pipeline, for a global batch of B sequences.
  int microbatches(int64_t global_batch) const {
    return static_cast<int>(global_batch / (int64_t{dp} * micro_batch));
  }
  bool operator==(const Layout&) const = default;
};

// The command-line form "tp=8,pp=8,dp=16,vp=2,mb=1,schedule=interleaved,recompute=full,sp=1,
// zero=1" (`weft simulate`, `weft ckpt convert --to-layout`, tune tables): keys in any order,
// missing ones keep their defaults; without dp, world / (tp*pp) when `world` > 0, else 1. Every
// problem at once, with "did you mean" for a mistyped key.
Result<Layout> parse(std::string_view text, int world = 0);
// The same form, every key: parse(to_string(l), tp * pp * dp) == l.
std::string to_string(const Layout& l);
// The short form used in tables: "tp8 pp8 dp16 vp2 mb1 interleaved full sp z1".
std::string short_name(const Layout& l);

}  // namespace weft::layout
