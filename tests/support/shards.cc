#include "support/shards.h"

#include <algorithm>

#include "weft/core/check.h"

namespace weft::test {
using model::ParamLayout;
using model::ShardRun;
using model::StageSpec;

void place_shards(const ParamLayout& local, const StageSpec& stage, const float* local_data,
                  const ParamLayout& global, float* global_data) {
  WEFT_CHECK(global.tp == 1, "the global layout is the serial one");
  const auto& ls = local.buffer.slices();
  for (size_t i = 0; i < ls.size(); ++i) {
    if (local.splits[i].replicated() && local.tp_rank != 0) continue;
    if (ls[i].name == "wte" && !stage.embedding) continue;  // the head's tied copy
    const SliceSpec& g = global.buffer.at(ls[i].name);
    for (const ShardRun& r : local.runs(i)) {
      std::copy_n(local_data + ls[i].offset + r.local, r.n, global_data + g.offset + r.global);
    }
  }
}

void gather_shards(const ParamLayout& local, const float* local_data, const ParamLayout& global,
                   float* global_data, comm::Communicator* group, const StageSpec& stage) {
  std::fill(global_data, global_data + global.buffer.total(), 0.0f);
  place_shards(local, stage, local_data, global, global_data);
  // Each element is nonzero on at most one rank, so the sum places it.
  if (group != nullptr && group->size() > 1) group->all_reduce(global_data, global.buffer.total());
}

}  // namespace weft::test
