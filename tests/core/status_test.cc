// Status collects every problem (so validation reports them together); Result<T> holds a value
// or a failed Status.

#include "weft/core/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace weft {
namespace {

TEST(Status, IsOkWhenDefaultConstructed) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE(s.problems().empty());
  EXPECT_EQ(s.message(), "");
  EXPECT_NO_THROW(s.throw_if_error("heading"));
}

TEST(Status, CollectsEveryProblemInOrder) {
  Status s;
  s.add("C=768 is not divisible by NH=5");
  s.add("T must be positive");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.problems(),
            (std::vector<std::string>{"C=768 is not divisible by NH=5", "T must be positive"}));
}

TEST(Status, ErrorFactoryCarriesOneProblem) {
  Status s = Status::error("bad");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.problems(), std::vector<std::string>{"bad"});
}

TEST(Status, MergeAppendsTheOtherStatusProblems) {
  Status a = Status::error("a1");
  Status b;
  b.add("b1");
  b.add("b2");
  a.merge(b);
  a.merge(Status{});
  EXPECT_EQ(a.problems(), (std::vector<std::string>{"a1", "b1", "b2"}));
}

TEST(Status, MessageListsProblemsUnderTheHeading) {
  Status s;
  s.add("first");
  s.add("second");
  EXPECT_EQ(s.message("invalid model config (gpt2.toml)"),
            "invalid model config (gpt2.toml)\n  - first\n  - second");
}

TEST(Status, MessageWithoutHeadingIsOneProblemPerLine) {
  Status s;
  s.add("first");
  s.add("second");
  EXPECT_EQ(s.message(), "first\nsecond");
}

TEST(Status, ThrowIfErrorThrowsTheFormattedMessage) {
  Status s;
  s.add("p1");
  s.add("p2");
  try {
    s.throw_if_error("heading");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "heading\n  - p1\n  - p2");
  }
}

TEST(Result, HoldsAValue) {
  Result<int> r = 42;
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(r.value(), 42);
}

TEST(Result, HoldsAnError) {
  Status s;
  s.add("p1");
  s.add("p2");
  Result<int> r = s;
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().problems().size(), 2u);
}

TEST(Result, ValueOfAnErrorThrowsWithTheProblems) {
  Result<int> r = Status::error("the problem");
  try {
    (void)r.value();
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the problem"), std::string::npos) << e.what();
  }
}

TEST(Result, CannotBeBuiltFromAnOkStatus) { EXPECT_THROW(Result<int>{Status{}}, Error); }

TEST(Result, ValueOrThrowReturnsTheValue) {
  Result<std::string> r = std::string("gpt2");
  EXPECT_EQ(std::move(r).value_or_throw("heading"), "gpt2");
}

TEST(Result, ValueOrThrowMovesMoveOnlyValuesOut) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  std::unique_ptr<int> p = std::move(r).value_or_throw();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
}

TEST(Result, ValueOrThrowThrowsWeftErrorListingEveryProblem) {
  Status s;
  s.add("C=768 is not divisible by NH=5");
  s.add("vocab_size must be positive");
  Result<int> r = s;
  try {
    (void)std::move(r).value_or_throw("invalid model config (x.toml)");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "invalid model config (x.toml)\n  - C=768 is not divisible by NH=5\n"
                 "  - vocab_size must be positive");
  }
}

}  // namespace
}  // namespace weft
