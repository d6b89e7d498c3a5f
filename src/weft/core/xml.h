#pragma once
// Escaping text for XML/SVG attributes and content (plots and schedule timelines are SVG).

#include <string>
#include <string_view>

namespace weft {

inline std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    out += c == '&'   ? "&amp;"
           : c == '<' ? "&lt;"
           : c == '>' ? "&gt;"
           : c == '"' ? "&quot;"
                      : std::string_view(&c, 1);
  }
  return out;
}

// The opening of a W x H chart: the <svg> element, a white background and the title centred at
// the top (the line charts of plot/plot.h and planner/tune.h). Close it with "</svg>\n".
inline std::string svg_chart_header(int width, int height, std::string_view title) {
  const std::string w = std::to_string(width), h = std::to_string(height);
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h +
         "\" viewBox=\"0 0 " + w + " " + h +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"" + w + "\" height=\"" +
         h + "\" fill=\"white\"/>\n<text x=\"" + std::to_string(width / 2) +
         "\" y=\"25\" text-anchor=\"middle\" font-size=\"15\">" + xml_escape(title) + "</text>\n";
}

}  // namespace weft
