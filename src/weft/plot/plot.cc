#include "weft/plot/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "weft/core/pending_file.h"
#include "weft/core/xml.h"

namespace weft::plot {
namespace {

double nice_step(double range, int target) {
  const double raw = range / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double f = norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10;
  return f * mag;
}

std::string tick_label(double v, double step) {
  if (std::abs(v) < step * 1e-9) return "0";
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  if (std::abs(v) >= 1e6 || (decimals > 6)) return fmt::format("{:.3g}", v);
  return fmt::format("{:.{}f}", v, decimals);
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double step = nice_step(hi - lo, target);
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string render_line_chart(const std::vector<Series>& series, const std::string& title,
                              const std::string& x_label, const std::string& y_label) {
  constexpr double W = 800, H = 480, left = 75, right = 25, top = 45, bottom = 55;
  const double pw = W - left - right, ph = H - top - bottom;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series) {
    for (auto [x, y] : s.points) {
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  std::string svg = svg_chart_header(static_cast<int>(W), static_cast<int>(H), title);
  if (!std::isfinite(x0)) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data</text>\n</svg>\n",
                       W / 2, H / 2);
    return svg;
  }
  if (x1 == x0) {
    x0 -= 1;
    x1 += 1;
  }
  if (y1 == y0) {
    y0 -= 0.5;
    y1 += 0.5;
  }
  // The y axis snaps outward to round numbers; the x axis spans the data exactly.
  const double ystep = nice_step(y1 - y0, 6);
  y0 = std::floor(y0 / ystep) * ystep;
  y1 = std::ceil(y1 / ystep) * ystep;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * ph; };

  for (double t : nice_ticks(y0, y1, 6)) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e5e5e5\"/>\n"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        left, py(t), left + pw, left - 6, py(t) + 4, tick_label(t, ystep));
  }
  const double xstep = nice_step(x1 - x0, 8);
  for (double t : nice_ticks(x0, x1, 8)) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        px(t), top + ph, top + ph + 5, top + ph + 19, tick_label(t, xstep));
  }
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n"
      "<text x=\"18\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {})\">{}</text>\n",
      left, top, pw, ph, left + pw / 2, H - 12, xml_escape(x_label), top + ph / 2, top + ph / 2,
      xml_escape(y_label));

  int legend_row = 0;
  for (const auto& s : series) {
    if (s.points.empty()) continue;
    std::string pts;
    for (auto [x, y] : s.points) pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    if (!pts.empty()) pts.pop_back();
    svg +=
        fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
                    xml_escape(s.color), pts);
    if (s.markers) {
      for (auto [x, y] : s.points) {
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(x),
                           py(y), xml_escape(s.color));
      }
    }
    const double ly = top + 16 + 18 * legend_row++;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"2.5\"/>\n"
        "<text x=\"{4:.1f}\" y=\"{5:.1f}\">{6}</text>\n",
        left + pw - 140, ly, left + pw - 115, xml_escape(s.color), left + pw - 108, ly + 4,
        xml_escape(s.label));
  }
  svg += "</svg>\n";
  return svg;
}

Result<std::vector<Series>> read_loss_curves(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::error(fmt::format("{}: cannot open metrics file", path));
  Series train{"train loss", "#1f77b4", {}, false};
  Series val{"validation loss", "#d62728", {}, true};
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return Status::error(fmt::format("{}:{}: not a JSON object", path, line_no));
    }
    if (!j.contains("step") || !j["step"].is_number()) {
      return Status::error(fmt::format("{}:{}: no \"step\" number", path, line_no));
    }
    const double step = j["step"].get<double>();
    if (j.contains("loss") && j["loss"].is_number()) {
      train.points.emplace_back(step, j["loss"].get<double>());
    }
    if (j.contains("val_loss") && j["val_loss"].is_number()) {
      val.points.emplace_back(step, j["val_loss"].get<double>());
    }
  }
  if (train.points.empty() && val.points.empty()) {
    return Status::error(fmt::format("{}: no loss records", path));
  }
  return std::vector<Series>{train, val};
}

Status write_loss_plot(const std::string& metrics_path, const std::string& svg_path,
                       const std::string& title) {
  auto curves = read_loss_curves(metrics_path);
  if (!curves.ok()) return curves.status();
  const std::string t =
      title.empty() ? std::filesystem::path(metrics_path).parent_path().filename().string() : title;
  return write_file_atomic(
      svg_path, render_line_chart(curves.value(), t.empty() ? "loss" : t, "step", "loss"));
}

}  // namespace weft::plot
