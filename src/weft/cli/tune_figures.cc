#include "weft/cli/tune_figures.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <optional>

#include "weft/core/status.h"
#include "weft/core/text_file.h"

namespace weft::cli {

TuneFigures read_tune_figures(const std::string& path, const planner::Job& job, int threads) {
  const std::optional<std::string> text = read_text_file(path);
  if (!text) throw Error(fmt::format("--refit-from {}: cannot read it", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const std::exception& e) {
    throw Error(fmt::format("--refit-from {} is not a tune.json ({})", path, e.what()));
  }
  const auto value = [&](const char* key) {
    if (!j.contains(key)) {
      throw Error(fmt::format(
          "--refit-from {}: no \"{}\": not a tune.json of this weft (rerun that tune)", path, key));
    }
    return j[key];
  };
  if (value("model") != job.model.name || value("world") != job.world ||
      value("global_batch") != job.global_batch || value("seq_len") != job.seq_len ||
      value("threads") != threads) {
    throw Error(fmt::format(
        "--refit-from {}: it tuned {} on {} process(es) x {} thread(s), global batch {} x {} "
        "tokens; this tune is {} on {} x {}, global batch {} x {}: a refit pools trials of one job",
        path, value("model").dump(), value("world").dump(), value("threads").dump(),
        value("global_batch").dump(), value("seq_len").dump(), job.model.name, job.world, threads,
        job.global_batch, job.seq_len));
  }
  if (j.value("figure", "") != "median step") {
    throw Error(fmt::format(
        "--refit-from {}: its figures are an older weft's (each layout's fastest step, not the "
        "median of its steps): rerun that tune",
        path));
  }
  TuneFigures out;
  out.gemm_speed = j.contains("gemm_speed") ? j["gemm_speed"].value("fastest", 0.0) : 0.0;
  for (const auto& l : value("layouts")) {
    if (l["measured_ms"].is_null()) continue;
    const layout::Layout c = layout::parse(l["layout"].get<std::string>(), job.world)
                                 .value_or_throw(fmt::format("--refit-from {}", path));
    out.layouts.push_back({job, c, l["measured_ms"].get<double>() * 1e-3,
                           l["measured_mib"].get<double>() * (1 << 20),
                           l["timed_steps"].get<int>()});
  }
  if (out.layouts.empty())
    throw Error(fmt::format("--refit-from {}: no layout was measured", path));
  return out;
}

}  // namespace weft::cli
