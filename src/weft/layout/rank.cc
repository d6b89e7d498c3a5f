#include "weft/layout/rank.h"

#include <algorithm>

#include "weft/core/check.h"
#include "weft/schedule/schedule.h"
#include "weft/schedule/send_buffers.h"

namespace weft::layout {

model::RankShape rank_shape(const Layout& l, int seq_len, int pp_rank) {
  return {.B = l.micro_batch,
          .T = seq_len,
          .recompute = l.recompute,
          .pp_rank = pp_rank,
          .tp = {l.tp, l.sequence_parallel},
          .zero = {l.zero, l.dp}};
}

std::vector<int> slot_pools(const schedule::Shape& shape, int pp_rank) {
  std::vector<int> pool(shape.vp);
  int body = -1, head = -1, pools = 0;
  for (int j = 0; j < shape.vp; ++j) {
    int& mine = shape.stage_of(pp_rank, j) == shape.num_stages() - 1 ? head : body;
    if (mine < 0) mine = pools++;
    pool[j] = mine;
  }
  return pool;
}

std::vector<std::vector<int>> pool_slots(const schedule::Schedule& schedule) {
  std::vector<std::vector<int>> pools;
  for (int r = 0; r < schedule.shape.pp; ++r) pools.push_back(slot_pools(schedule.shape, r));
  return schedule::peak_in_flight_per_group(schedule, pools);
}

model::RankProgram rank_program(const model::GptConfig& cfg, schedule::Kind kind,
                                const schedule::Shape& shape, int pp_rank,
                                std::span<const int> slots, schedule::SendBuffers buffers) {
  const std::vector<int> pools = slot_pools(shape, pp_rank);
  const int count = *std::max_element(pools.begin(), pools.end()) + 1;
  WEFT_CHECK(pp_rank >= 0 && pp_rank < shape.pp && static_cast<int>(slots.size()) == count,
             "rank_program: rank ", pp_rank, " of ", shape.pp, " with slots for ", slots.size(),
             " of its ", count, " slot pools");
  model::RankProgram rank{.chunks = {},
                          .slots = {},
                          .act_buffers = buffers.activations,
                          .grad_buffers = buffers.gradients,
                          .pipelined = shape.pp > 1,
                          .deferred_weight_grads = kind == schedule::Kind::ZeroBubbleH1};
  for (int j = 0; j < shape.vp; ++j) {
    rank.chunks.push_back(
        {model::pipeline_stage(cfg, shape.stage_of(pp_rank, j), shape.num_stages()), pools[j]});
  }
  for (const int s : slots) rank.slots.push_back(std::max(1, s));
  return rank;
}

model::RankProgram rank_program(const model::GptConfig& cfg, const schedule::Schedule& schedule,
                                int pp_rank) {
  return rank_program(
      cfg, schedule.kind, schedule.shape, pp_rank,
      schedule::peak_in_flight_per_group(schedule, pp_rank, slot_pools(schedule.shape, pp_rank)),
      schedule::send_buffers(schedule).at(pp_rank));
}

}  // namespace weft::layout
