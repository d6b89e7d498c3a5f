#pragma once
// Which parts of a model chunk's training state a rank writes to a checkpoint, and which it reads
// back. Every element of the model is written exactly once per job: a tensor replicated over
// tensor parallelism by tp rank 0; the tied word embedding by the first pipeline stage (the last
// stage's copy is kept equal to it); under ZeRO 0 by dp rank 0 (the replicas are equal), under
// ZeRO 1-3 by every dp rank, its own parts (optim/shards.h). Reading, a rank asks for all of
// its parts, replicated and tied copies included: load_pieces finds them wherever they were
// written, under whatever layout.

#include <type_traits>
#include <utility>
#include <vector>

#include "weft/checkpoint/checkpoint.h"
#include "weft/core/check.h"
#include "weft/model/param_layout.h"

namespace weft::checkpoint {

// A chunk as a rank holds it.
struct ChunkPlace {
  const model::ParamLayout* layout = nullptr;  // its tp shard of the stage's tensors
  model::StageSpec stage;
  int zero = 0, dp = 1, dp_rank = 0;
};

// The chunk's state, indexed by optim::OwnedPart::at of zero_owned_parts(layout, zero, dp,
// dp_rank) (optim::DistributedOptimizer::state()). m and v null: parameters only.
struct StateBuffers {
  float* params = nullptr;
  float* m = nullptr;
  float* v = nullptr;
};

// A piece of the chunk's state wherever the state lives: its tensor piece, its group (0 params,
// 1 adam_m, 2 adam_v: the order of StateBuffers) and its first element in that group's buffer
// (OwnedPart::at). `writing`: the pieces this rank writes; otherwise all it reads. `moments`:
// the groups adam_m and adam_v too.
struct StatePiece {
  TensorInfo tensor;
  int group = 0;
  int64_t at = 0;
};
std::vector<StatePiece> state_pieces(const ChunkPlace& chunk, bool writing, bool moments = true);

// The same, for a state in host memory: the pieces point into the buffers. Piece: WritePiece (the
// pieces this rank writes) or ReadPiece (all it reads).
template <typename Piece>
std::vector<Piece> host_pieces(const ChunkPlace& chunk, const StateBuffers& state) {
  WEFT_CHECK(state.params != nullptr, "a chunk's state needs its parameters");
  float* const buffers[] = {state.params, state.m, state.v};
  std::vector<Piece> out;
  for (StatePiece& p : state_pieces(chunk, std::is_same_v<Piece, WritePiece>,
                                    state.m != nullptr && state.v != nullptr)) {
    out.push_back({std::move(p.tensor), buffers[p.group] + p.at, {}});
  }
  return out;
}

}  // namespace weft::checkpoint
