// The text form round-trips; the grids of every kind at pp=4, m=8 match their goldens.

#include "weft/schedule/text.h"

#include <gtest/gtest.h>

#include "support/golden.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "weft/schedule/schedule.h"

namespace weft::schedule {
namespace {

Schedule make(Kind kind, const Shape& shape) {
  return make_schedule(kind, shape).value_or_throw("make_schedule");
}

TEST(Text, WritesEachInstructionForm) {
  EXPECT_EQ(instr_to_text({Op::Forward, 2, 0, -1}), "2F0");
  EXPECT_EQ(instr_to_text({Op::Backward, 1, 3, -1}), "1B3");
  EXPECT_EQ(instr_to_text({Op::BackwardInput, 1, 3, -1}), "1I3");
  EXPECT_EQ(instr_to_text({Op::BackwardWeight, 1, 3, -1}), "1W3");
  EXPECT_EQ(instr_to_text({Op::SendAct, 2, 0, 3}), "2SA0>3");
  EXPECT_EQ(instr_to_text({Op::RecvAct, 2, 0, 1}), "2RA0<1");
  EXPECT_EQ(instr_to_text({Op::SendGrad, 2, 0, 1}), "2SG0>1");
  EXPECT_EQ(instr_to_text({Op::RecvGrad, 2, 0, 3}), "2RG0<3");
  EXPECT_EQ(instr_to_text({Op::ReduceGrads, 12, -1, -1}), "12R");
  EXPECT_EQ(instr_to_text({Op::OptimizerStep, -1, -1, -1}), "O");
}

TEST(Text, ParsesWhatItWrites) {
  for (const Instr& in : std::vector<Instr>{{Op::Forward, 2, 10, -1},
                                            {Op::BackwardWeight, 0, 3, -1},
                                            {Op::SendGrad, 7, 1, 6},
                                            {Op::RecvAct, 4, 9, 3},
                                            {Op::ReduceGrads, 5, -1, -1},
                                            {Op::OptimizerStep, -1, -1, -1}}) {
    Result<Instr> parsed = parse_instr(instr_to_text(in));
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ(parsed.value(), in) << instr_to_text(in);
  }
}

TEST(Text, RejectsMalformedInstructionsSayingWhy) {
  auto why = [](std::string_view text) {
    Result<Instr> r = parse_instr(text);
    return r.ok() ? std::string("accepted") : r.status().problems().front();
  };
  EXPECT_NE(why("2X0").find("unknown op code 'X'"), std::string::npos) << why("2X0");
  EXPECT_NE(why("F0").find("missing the stage"), std::string::npos);
  EXPECT_NE(why("2F").find("missing the microbatch"), std::string::npos);
  EXPECT_NE(why("2SA0").find("SA needs '>peer'"), std::string::npos) << why("2SA0");
  EXPECT_NE(why("2SA0<1").find("SA needs '>peer'"), std::string::npos);
  EXPECT_NE(why("2F0>1").find("F takes no peer"), std::string::npos);
  EXPECT_NE(why("2R0").find("R takes no microbatch"), std::string::npos);
  EXPECT_NE(why("1O").find("O takes no stage"), std::string::npos);
  EXPECT_NE(why("2F0x").find("unexpected 'x'"), std::string::npos);
  EXPECT_NE(why("").find("no op code"), std::string::npos);
}

TEST(Text, RoundTripsEveryKindLoweredWithTheStepsEnd) {
  for (Kind kind : all_kinds()) {
    for (int pp : {1, 2, 3, 4}) {
      for (int m : {4, 8, 12}) {
        const Shape shape{.pp = pp, .vp = kind == Kind::Interleaved ? 2 : 1, .microbatches = m};
        if (!check_shape(kind, shape).ok()) continue;
        for (const Schedule& s :
             {make(kind, shape), add_optimizer_step(add_communication(make(kind, shape)))}) {
          const std::string text = to_text(s);
          Result<Schedule> back = parse_text(text);
          ASSERT_TRUE(back.ok()) << back.status().message();
          EXPECT_EQ(back.value(), s) << text;
          EXPECT_EQ(to_text(back.value()), text);
        }
      }
    }
  }
}

TEST(Text, HasAHeaderAndOneLinePerRank) {
  const std::string text = to_text(make(Kind::OneFOneB, {.pp = 2, .microbatches = 2}));
  EXPECT_EQ(text, "kind=1f1b pp=2 vp=1 microbatches=2\n0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  Result<Schedule> with_comments = parse_text(
      "# hand-written\nkind=1f1b pp=2 vp=1 microbatches=2\n\n0F0, 0F1,0B0,0B1\n"
      "1F0,1B0,1F1,1B1");
  ASSERT_TRUE(with_comments.ok()) << with_comments.status().message();
  Schedule empty{.kind = Kind::GPipe, .shape = {.pp = 2}, .programs = {{}, {}}};
  EXPECT_EQ(to_text(empty), "kind=gpipe pp=2 vp=1 microbatches=1\n-\n-\n");
  EXPECT_EQ(parse_text(to_text(empty)).value(), empty);
}

TEST(Text, ReportsEveryBadLineWithItsNumber) {
  Result<Schedule> r = parse_text(
      "kind=1f2b pp=2 vp=1 microbatches=x\n"
      "0F0,0Q1,0B0\n"
      "1F0,1B0,1F1,");
  ASSERT_FALSE(r.ok());
  const auto& p = r.status().problems();
  ASSERT_EQ(p.size(), 4u) << r.status().message();
  EXPECT_NE(p[0].find("line 1: unknown schedule kind '1f2b' (did you mean '1f1b'?)"),
            std::string::npos)
      << p[0];
  EXPECT_EQ(p[1], "line 1: microbatches wants a number, got 'x'");
  EXPECT_NE(p[2].find("line 2 (rank 0), item 1: '0Q1' is not an instruction"), std::string::npos)
      << p[2];
  EXPECT_NE(p[3].find("line 3 (rank 1), item 3: '' is not an instruction"), std::string::npos)
      << p[3];

  Result<Schedule> short_text = parse_text("kind=1f1b pp=3 vp=1 microbatches=1\n0F0,0B0\n");
  ASSERT_FALSE(short_text.ok());
  EXPECT_EQ(short_text.status().problems().front(),
            "1 program lines for pp=3 (one line per pipeline rank)");
  EXPECT_FALSE(parse_text("").ok());
  EXPECT_FALSE(parse_text("pp=2\n").ok());
}

// --- Golden grids (DESIGN.md §6: goldens are text; a mismatch prints a diff). ---

class GoldenGrid : public ::testing::TestWithParam<Kind> {};

TEST_P(GoldenGrid, Pp4M8MatchesTheGolden) {
  const Kind kind = GetParam();
  const Shape shape{.pp = 4, .vp = kind == Kind::Interleaved ? 2 : 1, .microbatches = 8};
  const Schedule s = make(kind, shape);
  const std::string grid = format_grid(s);
  // Messages take no time on the grid's clock: lowering draws the same grid.
  EXPECT_EQ(format_grid(add_communication(s)), grid);
  test::expect_golden("schedule/" + std::string(kind_name(kind)) + "_pp4_m8.txt", grid);
}

INSTANTIATE_TEST_SUITE_P(EveryKind, GoldenGrid,
                         ::testing::ValuesIn(all_kinds().begin(), all_kinds().end()),
                         [](const auto& info) {
                           std::string n(kind_name(info.param));
                           for (char& c : n)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return "kind_" + n;
                         });

TEST(Grid, MarksInterleavedChunksAndIdleSlots) {
  const std::string grid =
      format_grid(make(Kind::Interleaved, {.pp = 2, .vp = 2, .microbatches = 2}));
  const auto rows = test::golden_lines(grid);
  ASSERT_EQ(rows.size(), 2u) << grid;
  EXPECT_TRUE(rows[0].starts_with("rank 0 | F0a F1a F0b F1b")) << grid;
  EXPECT_TRUE(rows[1].starts_with("rank 1 | .   F0a F1a")) << grid;
}

}  // namespace
}  // namespace weft::schedule
