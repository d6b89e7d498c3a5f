#pragma once
// ZeRO's shard layout (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", §5), the one place its arithmetic lives: which data-parallel rank
// owns which elements of a model chunk's flat parameter buffer. Every unit (a layer, an
// embedding, ln_f) is padded to a multiple of dp * 16 elements and rank r owns the r-th of dp
// equal, contiguous, aligned ranges of it; a range may start or end inside a parameter, so a rank
// owns parts of slices. The optimizer keeps its shard buffers in zero_owned_parts' order,
// checkpoints write and read exactly those parts, the planner's volume and the memory model count
// the same ranges. Pure arithmetic, linked by the planner without kernels or communicators.

#include <cstdint>
#include <string>
#include <vector>

#include "weft/tensor/flat_buffer.h"

namespace weft::optim {

// The tensors used together, the unit of ZeRO-3's gathering and of the gradient buckets (Zhao et
// al. 2023, "PyTorch FSDP", flat-parameter units): a layer ("h.3"), the word embedding ("wte"),
// the position embedding ("wpe") or the final LayerNorm ("ln_f"). Contiguous in the buffer,
// starting on a multiple of the layout's unit_align, in buffer order.
struct ParamUnit {
  std::string name;
  size_t first_slice = 0, end_slice = 0;  // its slices: [first_slice, end_slice)
  int64_t begin = 0, end = 0;             // elements [begin, end), inner alignment padding included
  int64_t numel() const { return end - begin; }
};

// What ZeRO partitions: a chunk's flat buffer and its units (model::ParamLayout adds the rest).
struct UnitLayout {
  BufferLayout buffer;           // this rank's shards (local shapes)
  std::vector<ParamUnit> units;  // a partition of buffer's slices
  int64_t unit_align = BufferLayout::kAlignElems;
};

// The unit alignment ZeRO stage `zero` over `dp` ranks needs: dp * kAlignElems, so each unit's
// range padded for dp equal aligned shards ends before the next unit; kAlignElems for ZeRO 0.
int64_t zero_unit_align(int zero, int dp);
// ZeRO 2/3: unit gradient reductions a backward pass keeps outstanding before it waits for the
// oldest (the units' full gradients, and MPI's temporaries, stay resident meanwhile).
inline constexpr int kZeroBucketsInFlight = 2;

struct ShardRange {
  int64_t begin = 0, end = 0;  // element offsets, end exclusive
  int64_t size() const { return end - begin; }
  bool operator==(const ShardRange&) const = default;
};

// numel rounded up to a multiple of dp * align: what a reduce-scatter or all-gather moves.
int64_t zero_padded_size(int64_t numel, int dp, int64_t align = BufferLayout::kAlignElems);

// Rank r's range of the padded run: [r * padded/dp, (r+1) * padded/dp). It may run past numel
// (padding); clip with std::min(end, numel) where real elements are needed.
ShardRange zero_shard(int64_t numel, int dp, int rank, int64_t align = BufferLayout::kAlignElems);

// ZeRO 1-3: the rank's range of each unit (relative to the unit's first element) and where it
// sits in the rank's shard buffers, which hold the units' ranges one after another.
struct UnitShard {
  int64_t begin = 0, size = 0;  // zero_shard(unit.numel(), dp, rank)
  int64_t at = 0;
  bool operator==(const UnitShard&) const = default;
};
std::vector<UnitShard> zero_unit_shards(const UnitLayout& layout, int dp, int rank);

struct OwnedPart {
  size_t slice = 0;   // index into layout.buffer.slices()
  int64_t begin = 0;  // first element, relative to the slice's start
  int64_t n = 0;      // elements
  int64_t at = 0;     // where the part sits in the rank's shard buffers
  bool operator==(const OwnedPart&) const = default;
};

// ZeRO 1-3: the rank's parts, unit after unit, `at` as zero_unit_shards places the unit's range.
// ZeRO 0 (no partition): every slice whole, `at` its buffer offset.
std::vector<OwnedPart> zero_owned_parts(const UnitLayout& layout, int zero, int dp, int rank);

// The elements of the shard buffers zero_owned_parts() addresses (ZeRO 0: the chunk buffer's).
int64_t zero_owned_elements(const UnitLayout& layout, int zero, int dp, int rank);

}  // namespace weft::optim
