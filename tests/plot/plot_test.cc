// Loss plots: a well-formed SVG with axes, ticks, both curves and a legend; clear errors for bad
// metrics files.

#include "weft/plot/plot.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <stack>

namespace weft::plot {
namespace {
namespace fs = std::filesystem;

// Tags balance (every <x> closed by </x> or self-closed), attributes are quoted: enough of XML to
// catch a broken writer without an XML library.
::testing::AssertionResult well_formed(const std::string& svg) {
  std::stack<std::string> open;
  const std::regex tag(R"(<(/?)([a-z]+)((?:\s+[a-zA-Z0-9:_-]+="[^"<>]*")*)\s*(/?)>)");
  size_t pos = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator();
       ++it) {
    const auto& m = *it;
    const std::string between = svg.substr(pos, m.position() - pos);
    if (between.find('<') != std::string::npos) {
      return ::testing::AssertionFailure() << "malformed tag near: " << between;
    }
    pos = m.position() + m.length();
    if (m[1] == "/") {
      if (open.empty() || open.top() != m[2]) {
        return ::testing::AssertionFailure() << "unbalanced </" << m[2] << ">";
      }
      open.pop();
    } else if (m[4] != "/") {
      open.push(m[2]);
    }
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "unclosed <" << open.top() << ">";
  return ::testing::AssertionSuccess();
}

TEST(NiceTicks, AreRoundNumbersCoveringTheRange) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(2.13, 4.87, 6), (std::vector<double>{2.5, 3, 3.5, 4, 4.5}));
  EXPECT_EQ(nice_ticks(1, 1000, 4).front(), 200);
}

TEST(Plot, ChartIsWellFormedWithAxesTicksCurvesAndLegend) {
  Series train{"train loss", "#1f77b4", {{1, 4.2}, {2, 3.9}, {3, 3.1}, {4, 2.8}}, false};
  Series val{"validation loss", "#d62728", {{2, 4.0}, {4, 3.0}}, true};
  const std::string svg = render_line_chart({train, val}, "tiny <run> & co", "step", "loss");
  EXPECT_TRUE(well_formed(svg));
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("tiny &lt;run&gt; &amp; co"), std::string::npos);  // escaped title
  size_t polylines = 0, circles = 0;
  for (size_t p = 0; (p = svg.find("<polyline", p)) != std::string::npos; ++p) ++polylines;
  for (size_t p = 0; (p = svg.find("<circle", p)) != std::string::npos; ++p) ++circles;
  EXPECT_EQ(polylines, 2u);
  EXPECT_EQ(circles, 2u);  // validation points are marked
  EXPECT_NE(svg.find(">train loss</text>"), std::string::npos);
  EXPECT_NE(svg.find(">validation loss</text>"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find(">3.0</text>"), std::string::npos);  // a y tick
  EXPECT_TRUE(well_formed(render_line_chart({}, "empty", "step", "loss")));
}

TEST(Plot, ReadsCurvesFromMetricsAndNamesTheLineOfABadRecord) {
  const std::string path =
      (fs::temp_directory_path() / ("weft_plot_" + std::to_string(::getpid()) + ".jsonl")).string();
  std::ofstream(path) << "{\"step\":1,\"loss\":4.0}\n{\"step\":2,\"loss\":null}\n"
                         "{\"step\":3,\"loss\":3.0,\"val_loss\":3.2}\n\n";
  auto curves = read_loss_curves(path).value();
  ASSERT_EQ(curves.size(), 2u);
  EXPECT_EQ(curves[0].points.size(), 2u);  // the null (non-finite) loss is left out
  EXPECT_EQ(curves[1].points, (std::vector<std::pair<double, double>>{{3, 3.2}}));
  const std::string svg_path = path + ".svg";
  ASSERT_TRUE(write_loss_plot(path, svg_path, "t").ok());
  std::ifstream in(svg_path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_TRUE(well_formed(ss.str()));

  std::ofstream(path, std::ios::app) << "{\"step\":4,\"loss\":2.0}\nnot json\n";
  auto bad = read_loss_curves(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":6: not a JSON object"), std::string::npos)
      << bad.status().message();
  std::ofstream(path) << "{\"loss\":2.0}\n";
  EXPECT_NE(read_loss_curves(path).status().message().find(":1: no \"step\""), std::string::npos);
  std::ofstream(path) << "";
  EXPECT_NE(read_loss_curves(path).status().message().find("no loss records"), std::string::npos);
  EXPECT_NE(
      read_loss_curves("/no/such.jsonl").status().message().find("/no/such.jsonl: cannot open"),
      std::string::npos);
  fs::remove(path);
  fs::remove(svg_path);
}

}  // namespace
}  // namespace weft::plot
