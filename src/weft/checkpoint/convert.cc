#include "weft/checkpoint/convert.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <vector>

#include "weft/checkpoint/placement.h"
#include "weft/optim/shards.h"
#include "weft/tensor/aligned_buffer.h"

namespace weft::checkpoint {

namespace {

Status check_layout(const ParallelLayout& l) {
  Status s;
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.vp < 1) s.add("tp, pp, dp and vp must be >= 1");
  if (l.zero < 0 || l.zero > 3) s.add(fmt::format("zero={} is not 0, 1, 2 or 3", l.zero));
  return s;
}

}  // namespace

Result<ParallelLayout> parse_layout(const std::string& text) {
  ParallelLayout l;
  Status s;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    at = end + 1;
    if (item.empty()) continue;  // "" (or a trailing comma): the defaults
    const size_t eq = item.find('=');
    int value = 0;
    const char* v = eq == std::string::npos ? nullptr : item.c_str() + eq + 1;
    const auto [ptr, ec] = v == nullptr ? std::from_chars(item.c_str(), item.c_str(), value)
                                        : std::from_chars(v, item.c_str() + item.size(), value);
    if (v == nullptr || ec != std::errc() || ptr != item.c_str() + item.size()) {
      s.add(fmt::format("'{}' is not KEY=INTEGER (keys tp, pp, dp, vp, zero)", item));
      continue;
    }
    const std::string key = item.substr(0, eq);
    int* field = key == "tp"     ? &l.tp
                 : key == "pp"   ? &l.pp
                 : key == "dp"   ? &l.dp
                 : key == "vp"   ? &l.vp
                 : key == "zero" ? &l.zero
                                 : nullptr;
    if (field == nullptr) {
      s.add(fmt::format("unknown key '{}' (keys tp, pp, dp, vp, zero)", key));
    } else {
      *field = value;
    }
  }
  s.merge(check_layout(l));
  if (!s.ok()) return s;
  return l;
}

Result<std::string> convert(const std::string& in, const std::string& out_root,
                            const ParallelLayout& to) {
  auto dir = resolve(in);
  if (!dir.ok()) return dir.status();
  auto md = read_metadata(dir.value());
  if (!md.ok()) return md.status();
  const Metadata& src = md.value();
  const model::GptConfig& cfg = src.model;
  Status s = check_layout(to);
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
          auto r = read_pieces(place, state);
          targets.insert(targets.end(), r.begin(), r.end());
          auto w = write_pieces(place, state);
          pieces.insert(pieces.end(), w.begin(), w.end());
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
