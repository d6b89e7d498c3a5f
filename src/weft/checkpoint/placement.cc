#include "weft/checkpoint/placement.h"

#include "weft/core/check.h"
#include "weft/model/zero_parts.h"

namespace weft::checkpoint {
namespace {

constexpr const char* kGroups[] = {"params", "adam_m", "adam_v"};

template <typename Piece>
std::vector<Piece> pieces(const ChunkPlace& c, const StateBuffers& state, bool writing) {
  WEFT_CHECK(c.layout != nullptr && state.params != nullptr, "a chunk's place needs its state");
  const model::ParamLayout& L = *c.layout;
  std::vector<Piece> out;
  if (writing && c.zero == 0 && c.dp_rank != 0) return out;
  const auto parts = model::zero_owned_parts(L, c.zero, c.dp, c.dp_rank);
  float* const buffers[] = {state.params, state.m, state.v};
  for (int g = 0; g < 3; ++g) {
    if (buffers[g] == nullptr) continue;
    for (const model::OwnedPart& p : parts) {
      const std::string& name = L.buffer.slices()[p.slice].name;
      if (writing && L.splits[p.slice].replicated() && L.tp_rank != 0) continue;
      if (writing && name == "wte" && !c.stage.embedding) continue;  // the tied copy
      out.push_back({tensor_piece(L, p.slice, p.begin, p.n, kGroups[g]), buffers[g] + p.at});
    }
  }
  return out;
}

}  // namespace

std::vector<WritePiece> write_pieces(const ChunkPlace& chunk, const StateBuffers& state) {
  return pieces<WritePiece>(chunk, state, true);
}

std::vector<ReadPiece> read_pieces(const ChunkPlace& chunk, const StateBuffers& state) {
  return pieces<ReadPiece>(chunk, state, false);
}

TensorInfo tensor_piece(const model::ParamLayout& layout, size_t slice, int64_t begin, int64_t n,
                        const char* group) {
  TensorInfo t;
  t.name = layout.buffer.slices()[slice].name;
  t.group = group;
  t.global_shape = layout.global_shapes[slice];
  t.split = layout.splits[slice];
  t.tp = layout.tp;
  t.tp_rank = layout.tp_rank;
  if (t.split.replicated() || t.tp == 1) {  // the whole tensor: one canonical description
    t.split = model::TpSplit{};
    t.tp = 1;
    t.tp_rank = 0;
  }
  t.begin = begin;
  t.count = n;
  return t;
}

}  // namespace weft::checkpoint
