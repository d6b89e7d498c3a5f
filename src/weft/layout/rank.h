#pragma once
// A pipeline rank's part of a layout, computed in one place from the schedule its ranks run: its
// model chunks, the pools of activation slots they share (per pool the most microbatches its
// chunks keep in flight at once) and its send buffers (schedule::send_buffers). The runtime builds
// exactly these (runtime/pipeline_runner.h) and the memory model prices exactly these (model::
// estimate_rank_memory), for the trainer's launch gate and the planner alike.
//
// Slot pools: every stage holds the same number of layers (model::validate_pipeline), so the slot
// layouts of a rank's chunks differ only where one holds the head (the final LayerNorm and the
// logits). The chunks without the head share one pool, the head's chunk has its own: a rank then
// holds the slots its program keeps in flight at once, as Megatron-LM's memory does, not the sum
// of each chunk's own peak.

#include <span>
#include <vector>

#include "weft/layout/layout.h"
#include "weft/model/gpt_config.h"
#include "weft/model/memory.h"
#include "weft/schedule/instr.h"
#include "weft/schedule/simulate.h"

namespace weft::layout {

// Pipeline rank `pp_rank`'s part of `l` at sequence length `seq_len`, as the memory model and the
// runtime take it (the trainer's runner, a device's arena, the planner's memory).
model::RankShape rank_shape(const Layout& l, int seq_len, int pp_rank);

// Chunk j's slot pool on `pp_rank`, pools numbered in order of their first chunk.
std::vector<int> slot_pools(const schedule::Shape& shape, int pp_rank);
// Per rank, the slots of each of its pools (schedule::peak_in_flight_per_group over slot_pools).
std::vector<std::vector<int>> pool_slots(const schedule::Schedule& schedule);

// `slots`: the rank's pool_slots; `buffers`: its schedule::send_buffers.
model::RankProgram rank_program(const model::GptConfig& cfg, schedule::Kind kind,
                                const schedule::Shape& shape, int pp_rank,
                                std::span<const int> slots, schedule::SendBuffers buffers);
// The same from the schedule (compute only or lowered), computing both.
model::RankProgram rank_program(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                                int pp_rank);

}  // namespace weft::layout
