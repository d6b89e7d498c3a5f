#include "weft/schedule/instr.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace weft::schedule {
namespace {

TEST(ScheduleInstr, EveryOpNameParsesBackToItsOp) {
  std::set<std::string_view> names, codes;
  for (Op op : all_ops()) {
    Result<Op> parsed = parse_op(op_name(op));
    ASSERT_TRUE(parsed.ok()) << op_name(op);
    EXPECT_EQ(parsed.value(), op);
    names.insert(op_name(op));
    codes.insert(op_code(op));
  }
  EXPECT_EQ(all_ops().size(), 10u);
  EXPECT_EQ(names.size(), all_ops().size()) << "names must be distinct";
  EXPECT_EQ(codes.size(), all_ops().size()) << "codes must be distinct";
}

TEST(ScheduleInstr, EveryKindNameParsesBackToItsKind) {
  for (Kind kind : all_kinds()) {
    Result<Kind> parsed = parse_kind(kind_name(kind));
    ASSERT_TRUE(parsed.ok()) << kind_name(kind);
    EXPECT_EQ(parsed.value(), kind);
  }
  EXPECT_EQ(kind_name(Kind::GPipe), "gpipe");
  EXPECT_EQ(kind_name(Kind::OneFOneB), "1f1b");
  EXPECT_EQ(kind_name(Kind::Interleaved), "interleaved");
  EXPECT_EQ(kind_name(Kind::ZeroBubbleH1), "zb-h1");
}

TEST(ScheduleInstr, AnUnknownKindListsTheKnownOnesAndTheNearest) {
  Result<Kind> parsed = parse_kind("1f1");
  ASSERT_FALSE(parsed.ok());
  const std::string message = parsed.status().message();
  EXPECT_NE(message.find("did you mean '1f1b'"), std::string::npos) << message;
  EXPECT_NE(message.find("gpipe, 1f1b, interleaved, zb-h1"), std::string::npos) << message;
  EXPECT_FALSE(parse_op("fwd").ok());
}

TEST(ScheduleInstr, OpClassesPartitionTheOps) {
  for (Op op : all_ops()) {
    const int classes = int{is_compute(op)} + int{is_send(op)} + int{is_recv(op)} +
                        int{op == Op::ReduceGrads || op == Op::OptimizerStep};
    EXPECT_EQ(classes, 1) << op_name(op);
    EXPECT_EQ(is_p2p(op), is_send(op) || is_recv(op));
  }
}

TEST(ScheduleInstr, StagesLiveOnRankStageModPp) {
  const Shape shape{.pp = 4, .vp = 2, .microbatches = 8};
  EXPECT_EQ(shape.num_stages(), 8);
  EXPECT_EQ(shape.rank_of(5), 1);
  EXPECT_EQ(shape.chunk_of(5), 1);
  EXPECT_EQ(shape.chunk_of(3), 0);
}

}  // namespace
}  // namespace weft::schedule
