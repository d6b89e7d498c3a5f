#pragma once
// What `weft plan` and `weft simulate` print and write: the ranking table, one configuration's
// breakdown, the infeasible ones with their reasons, a Chrome trace (chrome://tracing, Perfetto)
// with one track per pipeline rank. (The SVG timeline: schedule::render_svg.)

#include <string>

#include "weft/planner/search.h"
#include "weft/planner/simulate.h"

namespace weft::planner {

// The job and cluster in one line: "gpt-175b on 1024 x A100-SXM4-80GB (dgx-a100), B=1536 ...".
std::string describe(const Cluster& cluster, const Job& job);

// The best `top` rows: configuration, step time split into compute, bubble, tp/pp/dp
// communication and optimizer; memory per device split into weights, gradients, optimizer
// state, activations and buffers; tokens/s, TFLOP/s per device, MFU, days to train.
std::string format_ranking(const SearchResult& result, const Job& job, int top);
// Infeasible candidates per reason, with one example configuration each.
std::string format_infeasible(const SearchResult& result, int examples);
// One configuration in full, including its placement (which link each group uses).
std::string format_prediction(const Prediction& p, const Cluster& cluster, const Job& job);

// Chrome trace event format: one track (tid) per pipeline rank, a complete event per instruction
// that takes time, named like the grid ("F3b"), times in microseconds.
std::string chrome_trace_json(const schedule::Timeline& timeline, const std::string& title);

}  // namespace weft::planner
