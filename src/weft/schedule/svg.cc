#include "weft/schedule/svg.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "weft/core/xml.h"
#include "weft/schedule/text.h"

namespace weft::schedule {
namespace {

constexpr double kLeft = 70, kTop = 34, kRowHeight = 30, kBoxHeight = 22, kRight = 20;
constexpr double kTargetWidth = 1400;

std::string_view colour(Op op) {
  // In Op's order: F, B, I, W, the four sends and receives, R, O.
  constexpr std::array<std::string_view, 10> kColours = {"#4e79a7", "#59a14f", "#8cd17d", "#f28e2b",
                                                         "#333333", "#333333", "#333333", "#333333",
                                                         "#b07aa1", "#79706e"};
  return kColours.at(static_cast<size_t>(op));
}

}  // namespace

std::string render_svg(const Timeline& timeline, std::string_view title) {
  const Shape& shape = timeline.shape;
  const int ranks = static_cast<int>(timeline.ranks.size());
  const double makespan = std::max(timeline.makespan, 1e-9);
  // Wide enough to read a unit-cost grid (40 px a slot), never wider than ~kTargetWidth.
  const double scale = std::clamp(kTargetWidth / makespan, 1e-9, 40.0);
  const double width = kLeft + makespan * scale + kRight;
  const double height = kTop + ranks * kRowHeight + 40;
  auto x_of = [&](double t) { return kLeft + t * scale; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"monospace\" font-size=\"11\">\n",
      width, height);
  svg += fmt::format("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  svg += fmt::format(
      "<text x=\"{}\" y=\"20\" font-size=\"13\">{}</text>\n", kLeft,
      xml_escape(title.empty() ? fmt::format("makespan {:g}, bubble fraction {:.3f}",
                                             timeline.makespan, timeline.bubble_fraction)
                               : std::string(title)));
  for (int rank = 0; rank < ranks; ++rank) {
    const double y = kTop + rank * kRowHeight;
    svg += fmt::format("<text x=\"8\" y=\"{:.1f}\">rank {}</text>\n", y + kBoxHeight * 0.7, rank);
    // The row background: whatever no box covers is idle.
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"#eeeeee\"/>\n",
        x_of(0), y, makespan * scale, kBoxHeight);
    for (const Slot& slot : timeline.ranks[rank]) {
      const Instr& in = slot.instr;
      if (is_send(in.op)) {
        svg += fmt::format(
            "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" "
            "stroke-width=\"1\"><title>{4}</title></line>\n",
            x_of(slot.start), y + kBoxHeight, y + kBoxHeight + 4, colour(in.op),
            xml_escape(instr_to_text(in)));
        continue;
      }
      if (is_recv(in.op) || slot.end <= slot.start) continue;
      const double x = x_of(slot.start), w = (slot.end - slot.start) * scale;
      // Later model chunks of an interleaved schedule are lighter.
      const double opacity =
          shape.vp > 1 && in.stage >= 0 ? 1.0 - 0.5 * shape.chunk_of(in.stage) / shape.vp : 1.0;
      const std::string label = grid_label(in, shape);
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\" "
          "fill-opacity=\"{:.2f}\" stroke=\"white\" stroke-width=\"0.5\"><title>{} [{:g}, "
          "{:g})</title></rect>\n",
          x, y, w, kBoxHeight, colour(in.op), opacity, xml_escape(instr_to_text(in)), slot.start,
          slot.end);
      if (w >= 7.0 * label.size() + 4) {
        svg += fmt::format(
            "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"white\">{}</text>\n",
            x + w / 2, y + kBoxHeight * 0.7, xml_escape(label));
      }
    }
  }
  // Time axis: about ten ticks at round numbers.
  const double axis_y = kTop + ranks * kRowHeight + 4;
  const double raw_step = makespan / 10;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw_step)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw_step) {
      step = m * magnitude;
      break;
    }
  }
  svg += fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#999999\"/>\n",
      x_of(0), axis_y, x_of(makespan), axis_y);
  for (double t = 0; t <= makespan + 1e-9; t += step) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#999999\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\" fill=\"#666666\">{4:g}</text>\n",
        x_of(t), axis_y, axis_y + 4, axis_y + 16, t);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace weft::schedule
