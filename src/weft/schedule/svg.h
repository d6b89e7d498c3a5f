#pragma once
// An SVG picture of a timeline: one row per pipeline rank, a coloured box per F/B/I/W (and
// ReduceGrads/OptimizerStep when they take time) labelled as in the grid, idle time left as
// the grey row background, a tick for each message sent, and a time axis.

#include <string>
#include <string_view>

#include "weft/schedule/simulate.h"

namespace weft::schedule {

std::string render_svg(const Timeline& timeline, std::string_view title = "");

}  // namespace weft::schedule
