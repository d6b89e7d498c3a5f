#include "weft/schedule/svg.h"

#include <gtest/gtest.h>

#include <string>

#include "weft/schedule/schedule.h"

namespace weft::schedule {
namespace {

int count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (auto pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

TEST(Svg, DrawsABoxPerComputeOnAGreyRowPerRank) {
  const Shape shape{.pp = 4, .microbatches = 8};
  const Schedule s = add_communication(make_schedule(Kind::ZeroBubbleH1, shape).value());
  const std::string svg = render_svg(simulate(s, unit_costs(shape)), "zb-h1 <pp=4>");
  EXPECT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"")) << svg.substr(0, 80);
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
  EXPECT_EQ(count(svg, "fill=\"#4e79a7\""), 4 * 8);  // F
  EXPECT_EQ(count(svg, "fill=\"#8cd17d\""), 4 * 8);  // I
  EXPECT_EQ(count(svg, "fill=\"#f28e2b\""), 4 * 8);  // W
  EXPECT_EQ(count(svg, "fill=\"#eeeeee\""), 4);      // one idle background per rank
  EXPECT_EQ(count(svg, "<line x1") - count(svg, "stroke=\"#999999\""), 2 * 3 * 8);  // sends
  EXPECT_NE(svg.find(">W7</text>"), std::string::npos);
  EXPECT_NE(svg.find("zb-h1 &lt;pp=4&gt;"), std::string::npos);
  EXPECT_EQ(count(svg, "<rect"), count(svg, "</rect>") + 1 + 4);  // + page, row backgrounds
}

TEST(Svg, TitlesItselfWithTheBubbleByDefault) {
  const Shape shape{.pp = 2, .microbatches = 2};
  const std::string svg =
      render_svg(simulate(make_schedule(Kind::GPipe, shape).value(), unit_costs(shape)));
  EXPECT_NE(svg.find("makespan 6, bubble fraction 0.500"), std::string::npos);
}

}  // namespace
}  // namespace weft::schedule
