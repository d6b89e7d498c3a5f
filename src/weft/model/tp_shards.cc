#include "weft/model/tp_shards.h"

#include <algorithm>

#include "weft/core/check.h"

namespace weft::model {
namespace {
void check_same_model(const ParamLayout& local, const ParamLayout& global) {
  WEFT_CHECK(global.tp == 1 && local.buffer.slices().size() == global.buffer.slices().size(),
             "layouts of different models");
}
}  // namespace

void gather_tp_shards(const ParamLayout& local, const float* local_data, const ParamLayout& global,
                      float* global_data, comm::Communicator* tp) {
  check_same_model(local, global);
  std::fill(global_data, global_data + global.buffer.total(), 0.0f);
  const auto& ls = local.buffer.slices();
  const auto& gs = global.buffer.slices();
  for (size_t i = 0; i < ls.size(); ++i) {
    if (local.splits[i].replicated() && local.tp_rank != 0) continue;
    for (const ShardRun& r : local.runs(i)) {
      std::copy_n(local_data + ls[i].offset + r.local, r.n, global_data + gs[i].offset + r.global);
    }
  }
  // Each element is nonzero on at most one rank, so the sum places it.
  if (tp != nullptr && tp->size() > 1) tp->all_reduce(global_data, global.buffer.total());
}

void take_tp_shards(const ParamLayout& global, const float* global_data, const ParamLayout& local,
                    float* local_data) {
  check_same_model(local, global);
  const auto& ls = local.buffer.slices();
  const auto& gs = global.buffer.slices();
  for (size_t i = 0; i < ls.size(); ++i) {
    for (const ShardRun& r : local.runs(i)) {
      std::copy_n(global_data + gs[i].offset + r.global, r.n, local_data + ls[i].offset + r.local);
    }
  }
}

}  // namespace weft::model
