#include "weft/checkpoint/convert.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include "weft/checkpoint/placement.h"
#include "weft/optim/shards.h"
#include "weft/tensor/aligned_buffer.h"

namespace weft::checkpoint {

Result<std::string> convert(const std::string& in, const std::string& out_root,
                            const layout::Layout& to) {
  auto dir = resolve(in);
  if (!dir.ok()) return dir.status();
  auto md = read_metadata(dir.value());
  if (!md.ok()) return md.status();
  const Metadata& src = md.value();
  const model::GptConfig& cfg = src.model;
  Status s;
  if (to.tp < 1 || to.pp < 1 || to.dp < 1 || to.vp < 1) s.add("tp, pp, dp and vp must be >= 1");
  if (to.zero < 0 || to.zero > 3) s.add(fmt::format("zero={} is not 0, 1, 2 or 3", to.zero));
  if (!s.ok()) return s;
  s.merge(model::validate_tensor_parallel(cfg, to.tp));
  s.merge(model::validate_pipeline(cfg, to.pp, to.vp));
  if (!s.ok()) return s;
  const int stages = to.pp * to.vp;
  if (Status fresh = check_new_root(out_root, "convert"); !fresh.ok()) return fresh;

  auto tmp = begin_save(out_root, src.train.step, ::getpid());
  if (!tmp.ok()) return tmp.status();
  auto fail = [&](const Status& e) -> Result<std::string> {
    abort_save(tmp.value());
    return e;
  };
  Metadata m = src;
  m.parallel = to;
  m.shards.clear();
  m.tensors.clear();
  for (int pp_rank = 0; pp_rank < to.pp; ++pp_rank) {
    for (int tp_rank = 0; tp_rank < to.tp; ++tp_rank) {
      for (int dp_rank = 0; dp_rank < to.dp; ++dp_rank) {
        if (to.zero == 0 && dp_rank > 0) continue;  // the replicas write nothing: dp rank 0 does
        // The rank's chunks, their state read from the input, then written as the rank would.
        std::vector<model::ParamLayout> layouts(static_cast<size_t>(to.vp));  // fixed addresses
        std::vector<AlignedBuffer<float>> buffers;
        std::vector<ReadPiece> targets;
        std::vector<WritePiece> pieces;
        for (int j = 0; j < to.vp; ++j) {
          const model::StageSpec stage = model::pipeline_stage(cfg, pp_rank + j * to.pp, stages);
          model::ParamLayout& layout = layouts[static_cast<size_t>(j)];
          layout = model::gpt_param_layout(cfg, to.tp, tp_rank, stage,
                                           optim::zero_unit_align(to.zero, to.dp));
          const ChunkPlace place{&layout, stage, to.zero, to.dp, dp_rank};
          const int64_t n = optim::zero_owned_elements(layout, to.zero, to.dp, dp_rank);
          StateBuffers state;
          for (int g = 0; g < (src.has_optimizer ? 3 : 1); ++g) {
            buffers.emplace_back(n);
            (g == 0 ? state.params : g == 1 ? state.m : state.v) = buffers.back().data();
          }
          std::ranges::move(host_pieces<ReadPiece>(place, state), std::back_inserter(targets));
          std::ranges::move(host_pieces<WritePiece>(place, state), std::back_inserter(pieces));
        }
        Status loaded = load_pieces(dir.value(), src, cfg, targets);
        if (!loaded.ok()) return fail(loaded);
        auto files = write_rank_files(tmp.value(),
                                      rank_file_names(to.zero, tp_rank, dp_rank, pp_rank), pieces);
        if (!files.ok()) return fail(files.status());
        for (auto& sh : files.value().shards) m.shards.push_back(std::move(sh));
        for (auto& t : files.value().tensors) m.tensors.push_back(std::move(t));
      }
    }
  }
  return commit_save(out_root, tmp.value(), m, 0);
}

}  // namespace weft::checkpoint
