// The one TOML reader of the configs: typed reads, required and unknown keys, syntax errors.

#include "weft/core/toml_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace weft {
namespace {

toml::table parse(const std::string& text) {
  return parse_toml(text, "t.toml").value_or_throw("test TOML");
}

TEST(TomlReader, ReadsEachTypeAndKeepsTheFallbackOfAnAbsentKey) {
  const toml::table root = parse("[a]\ni = 3\nbig = 5000000000\nx = 2\ns = \"hi\"\nb = true\n");
  Status s;
  TomlReader r(root["a"].as_table(), "a", s);
  EXPECT_EQ(r.get("i", 0), 3);
  EXPECT_EQ(r.get<int64_t>("big", 0), 5000000000);
  EXPECT_DOUBLE_EQ(r.get("x", 0.0), 2.0);  // an integer is a number
  EXPECT_EQ(r.get<std::string>("s", ""), "hi");
  EXPECT_TRUE(r.get("b", false));
  EXPECT_EQ(r.get("absent", 7), 7);
  r.report_unknown();
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(TomlReader, NamesTheKeyOfAWrongTypeAndAValueOutOfRange) {
  const toml::table root = parse("[a]\ni = 1.5\nf = 1e85\nbig = 5000000000\nx = \"2\"\nb = 1\n");
  Status s;
  TomlReader r(root["a"].as_table(), "a", s);
  EXPECT_EQ(r.get("i", 4), 4);
  EXPECT_EQ(r.get("f", 4), 4);  // never converted (toml++'s cast of 1e85 is undefined)
  EXPECT_EQ(r.get("big", 4), 4);
  EXPECT_DOUBLE_EQ(r.get("x", 0.5), 0.5);
  EXPECT_FALSE(r.get("b", false));
  ASSERT_EQ(s.problems().size(), 5u) << s.message();
  EXPECT_EQ(s.problems()[0], "a.i must be an integer");
  EXPECT_EQ(s.problems()[1], "a.f must be an integer");
  EXPECT_EQ(s.problems()[2], "a.big=5000000000 is out of range");
  EXPECT_EQ(s.problems()[3], "a.x must be a number");
  EXPECT_EQ(s.problems()[4], "a.b must be true or false");
}

TEST(TomlReader, ReportsMissingRequiredKeysAndUnknownKeysWithASuggestion) {
  const toml::table root = parse("[model]\nn_embed = 32\nsub = 1\n");
  Status s;
  TomlReader r(root["model"].as_table(), "model", s);
  r.known({"sub"});
  EXPECT_EQ(r.get("n_embd", 0, true), 0);
  r.report_unknown();
  ASSERT_EQ(s.problems().size(), 2u) << s.message();
  EXPECT_EQ(s.problems()[0], "missing key model.n_embd");
  EXPECT_EQ(s.problems()[1], "unknown key model.n_embed (did you mean 'n_embd'?)");
}

TEST(TomlReader, AnAbsentTableReadsItsFallbacksQuietly) {
  Status s;
  TomlReader r(nullptr, "attention", s);
  EXPECT_EQ(r.get("flash", 1.5, true), 1.5);
  r.report_unknown();
  EXPECT_TRUE(s.ok());
}

TEST(TomlReader, ASyntaxErrorNamesTheFileAndLine) {
  const auto r = parse_toml("[a]\nx = \n", "broken.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().problems()[0].rfind("broken.toml: TOML syntax error at line 2: ", 0), 0u)
      << r.status().message();
}

TEST(TomlReader, UnknownKeysKeepTheTablesOrder) {
  const toml::table root = parse("b = 1\na = 2\nc = 3\n");
  EXPECT_EQ(unknown_keys(root, {"a"}), (std::vector<std::string>{"b", "c"}));
}

}  // namespace
}  // namespace weft
