#pragma once
// weft tune's probe of this machine's GEMM speed (planner::Cluster::gemm_speed): whether the
// cluster preset describes this machine (docs/planner.md §12, "Another host").

#include <vector>

#include "weft/comm/communicator.h"
#include "weft/model/gemm_shapes.h"
#include "weft/model/gpt_config.h"
#include "weft/planner/hardware.h"
#include "weft/runtime/gemm_ceiling.h"

namespace weft::cli {

// The machine's GEMM speed of the moment (Cluster::gemm_speed): the run's costliest GEMM shapes
// (kProbeShapes of them, at the run's micro-batch, tp = 1) timed on every rank at once, one batch
// of >= 5 ms each (about 30 ms in all on this machine), the slowest rank's time per shape, against
// the preset's GEMM model. The meter's buffers are made at construction, before the memory
// baseline, so no trial's memory holds them. The fastest of every probe is the run's speed, as a
// layout's fastest trial is its figure: the machine at its least disturbed.
class SpeedProbe {
 public:
  static constexpr int kProbeShapes = 4;

  SpeedProbe(const model::GptConfig& m, int micro_batch, int seq_len)
      : meter_(costliest(model::training_gemm_shapes(m, micro_batch, seq_len))) {}

  // Measures once on every rank of `world` together; returns this probe's speed.
  double probe(comm::Communicator* world, const planner::Cluster& c);
  double fastest() const { return fastest_; }
  int probes() const { return probes_; }

 private:
  static std::vector<model::GemmShape> costliest(std::vector<model::GemmShape> shapes);
  runtime::GemmCeilingMeter meter_;
  double fastest_ = 0;
  int probes_ = 0;
};

}  // namespace weft::cli
