#pragma once
// The part of a model chunk's parameters that data-parallel rank `rank` of `dp` owns under ZeRO
// (optim/distributed_optimizer.h): per unit the rank's equal aligned range
// (tensor/zero_shards.h), cut into the parts of the slices it covers. The optimizer keeps its shard
// buffers in this order, and checkpoints write and read exactly these parts. Pure arithmetic.

#include <cstdint>
#include <vector>

#include "weft/model/param_layout.h"

namespace weft::model {

struct OwnedPart {
  size_t slice = 0;   // index into layout.buffer.slices()
  int64_t begin = 0;  // first element, relative to the slice's start
  int64_t n = 0;      // elements
  int64_t at = 0;     // where the part sits in the rank's shard buffers
  bool operator==(const OwnedPart&) const = default;
};

// ZeRO 1-3: the rank's parts, unit after unit; `at` runs over them contiguously, each unit's range
// padded (its zero_shard size). ZeRO 0 (no partition): every slice whole, `at` its buffer offset.
std::vector<OwnedPart> zero_owned_parts(const ParamLayout& layout, int zero, int dp, int rank);

// The elements of the shard buffers zero_owned_parts() addresses (ZeRO 0: the chunk buffer's).
int64_t zero_owned_elements(const ParamLayout& layout, int zero, int dp, int rank);

}  // namespace weft::model
