#pragma once
// Loss curves as SVG, without Python: `weft plot METRICS.jsonl -o loss.svg`, and the loss.svg the
// trainer writes at the end of a run. A plain line chart: axes with round-number ticks, one
// polyline per series, a legend.

#include <string>
#include <utility>
#include <vector>

#include "weft/core/status.h"

namespace weft::plot {

struct Series {
  std::string label;
  std::string color;                              // any SVG color
  std::vector<std::pair<double, double>> points;  // (x, y), x increasing
  bool markers = false;  // a dot per point (sparse series such as validation loss)
};

// A self-contained SVG document. Series without points are left out; with no points at all the
// chart says so.
std::string render_line_chart(const std::vector<Series>& series, const std::string& title,
                              const std::string& x_label, const std::string& y_label);

// Training loss and validation loss against the step, from a metrics JSONL file. Errors name the
// file and line (not JSON, no "step"); non-finite losses (written as null) are left out.
Result<std::vector<Series>> read_loss_curves(const std::string& metrics_path);

// read_loss_curves + render_line_chart, written atomically to svg_path.
Status write_loss_plot(const std::string& metrics_path, const std::string& svg_path,
                       const std::string& title = "");

// Round-number ticks covering [lo, hi]: steps of 1, 2 or 5 times a power of ten.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

}  // namespace weft::plot
