#pragma once
// A rank's parts of the model (its pipeline stages' tensors, its tensor-parallel shards) placed in
// the serial (global) layout, so the equivalence tests compare a parallel run with the serial one.
// Tensors are matched by name. (Checkpoints address elements the same way, by global index, but
// piece by piece: checkpoint/placement.h.)

#include "weft/comm/communicator.h"
#include "weft/model/param_layout.h"

namespace weft::test {

// Adds this rank's part of `local` (a stage's layout, see gpt_param_layout) into global_data (laid
// out as `global`, the tp=1 whole-model layout), each element at its global index. Every global
// element gets exactly one contribution over the ranks of a replica: tp-replicated tensors come
// from tp rank 0, and the tied wte from the stage that holds the embedding.
void place_shards(const model::ParamLayout& local, const model::StageSpec& stage,
                  const float* local_data, const model::ParamLayout& global, float* global_data);

// place_shards for one stage, then the sum over `group` (null: one rank), which must hold the
// whole replica: every rank gets the whole model. Zeroes global_data first.
void gather_shards(const model::ParamLayout& local, const float* local_data,
                   const model::ParamLayout& global, float* global_data, comm::Communicator* group,
                   const model::StageSpec& stage = model::StageSpec{});

}  // namespace weft::test
