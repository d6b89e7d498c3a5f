#pragma once
// The time of one pipeline stage's work on one microbatch, from the cost model
// (docs/planner.md §3): the GEMMs and memory-bound kernels of its transformer layers, the tensor-
// parallel collectives between them, recomputation, and the embedding (first stage) or LM head
// and loss (last stage). Each pass is split into compute and exposed tp communication, so the
// step's breakdown can say where the time goes.

#include <vector>

#include "weft/planner/config.h"
#include "weft/planner/cost_model.h"
#include "weft/planner/hardware.h"

namespace weft::planner {

struct PassCost {
  double compute = 0;  // GEMMs and memory-bound kernels
  double tp_comm = 0;  // tensor-parallel collectives (not overlapped with compute)
  double dp_comm = 0;  // ZeRO-3's per-microbatch parameter gathers and gradient scatters
  double total() const { return compute + tp_comm + dp_comm; }
  PassCost& operator+=(const PassCost& o) {
    compute += o.compute;
    tp_comm += o.tp_comm;
    dp_comm += o.dp_comm;
    return *this;
  }
};

// One stage on one microbatch. backward = recompute + backward_input + backward_weight: the input
// gradient half (with the recomputation it needs) and the weight gradient half of a split
// backward (zb-h1).
struct StageCost {
  PassCost forward, recompute, backward_input, backward_weight;
  PassCost backward() const {
    PassCost p = recompute;
    p += backward_input;
    p += backward_weight;
    return p;
  }
};

struct StageCostInputs {
  const Cluster* cluster = nullptr;
  const Job* job = nullptr;
  const layout::Layout* config = nullptr;
  const Placement* placement = nullptr;
  bool overlap_dp = true;  // SimulateOptions::overlap_dp
};

// Per global stage 0 .. pp*vp-1: its layers plus the embedding (stage 0) or LM head and loss
// (the last stage).
std::vector<StageCost> stage_costs(const StageCostInputs& in);

// The device's peak for the job's number format (bf16, else fp16, for bf16-mixed; fp32).
double compute_peak(const Cluster& c, Precision p);

}  // namespace weft::planner
