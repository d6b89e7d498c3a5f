#include "weft/checkpoint/placement.h"

#include "weft/optim/shards.h"

namespace weft::checkpoint {
namespace {

// Elements [begin, begin + n) of slice `slice` of the layout, as a piece of its global tensor.
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

}  // namespace

std::vector<StatePiece> state_pieces(const ChunkPlace& c, bool writing, bool moments) {
  WEFT_CHECK(c.layout != nullptr, "a chunk's place needs its layout");
  const model::ParamLayout& L = *c.layout;
  std::vector<StatePiece> out;
  if (writing && c.zero == 0 && c.dp_rank != 0) return out;
  const auto parts = optim::zero_owned_parts(L, c.zero, c.dp, c.dp_rank);
  for (int g = 0; g < (moments ? 3 : 1); ++g) {
    for (const optim::OwnedPart& p : parts) {
      const std::string& name = L.buffer.slices()[p.slice].name;
      if (writing && L.splits[p.slice].replicated() && L.tp_rank != 0) continue;
      if (writing && name == "wte" && !c.stage.embedding) continue;  // the tied copy
      out.push_back({tensor_piece(L, p.slice, p.begin, p.n, kStateGroups[g]), g, p.at});
    }
  }
  return out;
}

}  // namespace weft::checkpoint
