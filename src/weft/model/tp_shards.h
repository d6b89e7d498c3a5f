#pragma once
// Moving whole tensors between a tensor-parallel rank's shards and the serial (global) layout:
// what checkpoints use so that a checkpoint is written in the serial layout and loads under any tp
// (each rank takes its slice), and what the equivalence tests compare.

#include "weft/comm/communicator.h"
#include "weft/model/param_layout.h"

namespace weft::model {

// global_data (global.count() floats, laid out as `global`, the tp=1 layout of the same model) =
// every rank's shards placed by global index; tp-replicated tensors are taken from tp rank 0.
// Collective over `tp` (null: one rank); every rank gets the whole result.
void gather_tp_shards(const ParamLayout& local, const float* local_data, const ParamLayout& global,
                      float* global_data, comm::Communicator* tp);

// local_data = this rank's slice of global_data. No communication.
void take_tp_shards(const ParamLayout& global, const float* global_data, const ParamLayout& local,
                    float* local_data);

}  // namespace weft::model
