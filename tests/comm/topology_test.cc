// The process grid: Megatron's rank order (rank = tp + tp * (dp + dp * pp)), the groups along
// each axis and their ids, validation that reports every problem, and the rank table's golden.

#include "weft/parallel/topology.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "support/golden.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "weft/core/check.h"

namespace weft::parallel {
namespace {

const std::vector<GridShape> kShapes = {{1, 1, 1}, {2, 1, 1}, {1, 4, 1}, {1, 1, 3}, {2, 2, 2},
                                        {2, 4, 2}, {3, 2, 5}, {8, 1, 2}, {4, 3, 1}};

std::string str(const GridShape& s) {
  return "tp=" + std::to_string(s.tp) + " pp=" + std::to_string(s.pp) +
         " dp=" + std::to_string(s.dp);
}

TEST(Topology, RankIsTpFastestThenDpThenPp) {
  for (const GridShape& s : kShapes) {
    SCOPED_TRACE(str(s));
    const Topology topo(s);
    ASSERT_EQ(topo.world(), s.tp * s.pp * s.dp);
    for (int r = 0; r < topo.world(); ++r) {
      const Coord c = topo.coord(r);
      EXPECT_EQ(r, c.tp + s.tp * (c.dp + s.dp * c.pp)) << "rank " << r;
      EXPECT_EQ(topo.rank(c), r);
    }
  }
}

TEST(Topology, EveryCoordinateHasExactlyOneRank) {
  for (const GridShape& s : kShapes) {
    SCOPED_TRACE(str(s));
    const Topology topo(s);
    std::set<int> seen;
    for (int pp = 0; pp < s.pp; ++pp) {
      for (int dp = 0; dp < s.dp; ++dp) {
        for (int tp = 0; tp < s.tp; ++tp) {
          const int r = topo.rank(Coord{tp, dp, pp});
          EXPECT_TRUE(r >= 0 && r < topo.world()) << r;
          EXPECT_EQ(topo.coord(r), (Coord{tp, dp, pp}));
          seen.insert(r);
        }
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), topo.world());
  }
}

TEST(Topology, RanksAndCoordinatesOutsideTheGridAreErrors) {
  const Topology topo({2, 2, 2});
  EXPECT_THROW(topo.coord(8), Error);
  EXPECT_THROW(topo.coord(-1), Error);
  EXPECT_THROW(topo.rank(Coord{2, 0, 0}), Error);
  EXPECT_THROW(topo.rank(Coord{0, 0, -1}), Error);
  EXPECT_THROW(Topology({0, 1, 1}), Error);
}

// For each axis: the groups partition the ranks; each group lists the ranks that differ only in
// that coordinate, in coordinate order; its id is shared by its members and ids count 0.. in the
// order of the groups' smallest ranks.
TEST(Topology, GroupsPartitionTheRanksAndTheirIdsFollowTheSmallestRank) {
  struct Axis {
    const char* name;
    std::vector<int> (Topology::*group)(int) const;
    int (Topology::*id)(int) const;
    int Coord::*coord;
    int GridShape::*size;
  };
  const std::vector<Axis> axes = {
      {"tp", &Topology::tp_group, &Topology::tp_group_id, &Coord::tp, &GridShape::tp},
      {"dp", &Topology::dp_group, &Topology::dp_group_id, &Coord::dp, &GridShape::dp},
      {"pp", &Topology::pp_group, &Topology::pp_group_id, &Coord::pp, &GridShape::pp}};
  for (const GridShape& s : kShapes) {
    const Topology topo(s);
    for (const Axis& a : axes) {
      SCOPED_TRACE(str(s) + " axis " + a.name);
      std::vector<int> id_of_smallest;  // group id, in the order groups are first met
      for (int r = 0; r < topo.world(); ++r) {
        const std::vector<int> g = (topo.*a.group)(r);
        ASSERT_EQ(static_cast<int>(g.size()), s.*a.size);
        EXPECT_EQ(g[topo.coord(r).*a.coord], r);  // a rank's place in its group is its coordinate
        for (size_t i = 0; i < g.size(); ++i) {
          Coord c = topo.coord(g[i]), mine = topo.coord(r);
          EXPECT_EQ(c.*a.coord, static_cast<int>(i));
          c.*a.coord = 0;
          mine.*a.coord = 0;
          EXPECT_EQ(c, mine) << "group members differ only along the axis";
          EXPECT_EQ((topo.*a.id)(g[i]), (topo.*a.id)(r));
        }
        if (*std::min_element(g.begin(), g.end()) == r) id_of_smallest.push_back((topo.*a.id)(r));
      }
      const int groups = topo.world() / (s.*a.size);
      ASSERT_EQ(static_cast<int>(id_of_smallest.size()), groups);
      for (int i = 0; i < groups; ++i) EXPECT_EQ(id_of_smallest[i], i);
    }
  }
}

TEST(Topology, NamesAProcessByItsCoordinates) {
  const Topology topo({2, 4, 2});
  EXPECT_EQ(topo.name(0), "tp0-dp0-pp0");
  EXPECT_EQ(topo.name(1), "tp1-dp0-pp0");
  EXPECT_EQ(topo.name(2), "tp0-dp1-pp0");
  EXPECT_EQ(topo.name(13), "tp1-dp0-pp3");
}

TEST(Validate, AcceptsAGridThatFillsTheWorld) {
  EXPECT_TRUE(validate({2, 4, 2}, 16).ok());
  EXPECT_TRUE(validate({1, 1, 1}, 1).ok());
}

TEST(Validate, ReportsEverySizeBelowOneAtOnce) {
  const Status s = validate({0, -1, 0}, 8);
  ASSERT_EQ(s.problems().size(), 3u) << s.message();
  EXPECT_EQ(s.problems()[0], "tp=0 must be >= 1");
  EXPECT_EQ(s.problems()[1], "pp=-1 must be >= 1");
  EXPECT_EQ(s.problems()[2], "dp=0 must be >= 1");
}

TEST(Validate, ReportsAGridThatDoesNotFillTheWorldInTheUsersTerms) {
  const Status s = validate({2, 2, 2}, 6);
  ASSERT_EQ(s.problems().size(), 1u) << s.message();
  EXPECT_EQ(s.problems()[0], "tp*pp*dp = 2*2*2 = 8 does not equal the world size 6");
}

// --- The golden rank table (DESIGN.md §6: goldens are text; a mismatch prints a diff). ---

// The whole table, one line per rank ("rank  3  tp1-dp1-pp0  tp group [2 3] ...").
std::string format_table(const Topology& topo) {
  const GridShape& s = topo.shape();
  std::string out = fmt::format("grid tp={} pp={} dp={} world={}\n", s.tp, s.pp, s.dp, s.world());
  for (int r = 0; r < topo.world(); ++r) {
    out += fmt::format("rank {:>3}  {:<14} tp group {}  dp group {}  pp group {}\n", r,
                       topo.name(r), topo.tp_group(r), topo.dp_group(r), topo.pp_group(r));
  }
  return out;
}

TEST(FormatTable, Tp2Pp4Dp2MatchesTheGolden) {
  test::expect_golden("topology/tp2-pp4-dp2.txt",
                      format_table(Topology({.tp = 2, .pp = 4, .dp = 2})));
}

}  // namespace
}  // namespace weft::parallel
