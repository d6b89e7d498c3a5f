#pragma once
// Moving whole tensors between a rank's parts of the model (its pipeline stages' tensors, its
// tensor-parallel shards) and the serial (global) layout: what checkpoints use, so a checkpoint is
// written in the serial layout and loads under any tp and pp (each rank takes its part), and what
// the equivalence tests compare. Tensors are matched by name.

#include "weft/comm/communicator.h"
#include "weft/model/param_layout.h"

namespace weft::model {

// Adds this rank's part of `local` (a stage's layout, see gpt_param_layout) into global_data (laid
// out as `global`, the tp=1 whole-model layout), each element at its global index. Every global
// element gets exactly one contribution over the ranks of a replica: tp-replicated tensors come
// from tp rank 0, and the tied wte from the stage that holds the embedding.
void place_shards(const ParamLayout& local, const StageSpec& stage, const float* local_data,
                  const ParamLayout& global, float* global_data);

// place_shards for one stage, then the sum over `group` (null: one rank), which must hold the
// whole replica: every rank gets the whole model. Zeroes global_data first.
void gather_shards(const ParamLayout& local, const float* local_data, const ParamLayout& global,
                   float* global_data, comm::Communicator* group,
                   const StageSpec& stage = StageSpec{});

// local_data = this rank's slice of global_data, for every tensor of `local`. No communication.
void take_shards(const ParamLayout& global, const float* global_data, const ParamLayout& local,
                 float* local_data);

}  // namespace weft::model
