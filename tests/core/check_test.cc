// WEFT_CHECK: silent when the condition holds; otherwise a weft::Error naming file:line, the
// failed condition and the streamed message parts.

#include "weft/core/check.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace weft {
namespace {

std::string failure_message(int c, int nh) {
  try {
    WEFT_CHECK(c % nh == 0, "C=", c, " is not divisible by NH=", nh);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(WeftCheck, DoesNothingWhenTheConditionHolds) {
  EXPECT_NO_THROW(WEFT_CHECK(1 + 1 == 2));
  EXPECT_NO_THROW(WEFT_CHECK(true, "never shown"));
}

TEST(WeftCheck, ThrowsWeftErrorWhenTheConditionFails) {
  EXPECT_THROW(WEFT_CHECK(1 + 1 == 3), Error);
  EXPECT_THROW(WEFT_CHECK(false, "x"), std::runtime_error);  // Error is a runtime_error
}

TEST(WeftCheck, MessageCarriesFileLineConditionAndStreamedParts) {
  const std::string msg = failure_message(768, 5);
  EXPECT_NE(msg.find("check_test.cc:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("check failed: c % nh == 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find(": C=768 is not divisible by NH=5"), std::string::npos) << msg;
}

TEST(WeftCheck, MessageWithoutPartsEndsWithTheCondition) {
  try {
    WEFT_CHECK(2 < 1);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    const std::string tail = "check failed: 2 < 1";
    ASSERT_GE(msg.size(), tail.size());
    EXPECT_EQ(msg.substr(msg.size() - tail.size()), tail);
  }
}

TEST(WeftCheck, EvaluatesTheConditionExactlyOnce) {
  int calls = 0;
  auto once = [&] { return ++calls > 0; };
  WEFT_CHECK(once());
  EXPECT_EQ(calls, 1);
}

TEST(WeftCheck, EvaluatesMessagePartsOnlyOnFailure) {
  int calls = 0;
  auto part = [&] { return ++calls; };
  WEFT_CHECK(true, part());
  EXPECT_EQ(calls, 0);
  EXPECT_THROW(WEFT_CHECK(false, part()), Error);
  EXPECT_EQ(calls, 1);
}

TEST(WeftFail, ThrowsTheFailureOfAFalseCheckWithItsMessage) {
  try {
    WEFT_FAIL("unknown Op ", 7);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("check_test.cc:"), std::string::npos) << msg;
    const std::string tail = "check failed: false: unknown Op 7";
    ASSERT_GE(msg.size(), tail.size());
    EXPECT_EQ(msg.substr(msg.size() - tail.size()), tail);
  }
}

}  // namespace
}  // namespace weft
