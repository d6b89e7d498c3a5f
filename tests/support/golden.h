#pragma once
// Golden text files (DESIGN.md §6: goldens are text; a mismatch prints a diff).
//   expect_golden("schedule/1f1b_pp4_m8.txt", format_grid(s));
// compares with tests/golden/<name> under WEFT_SOURCE_DIR; WEFT_UPDATE_GOLDEN=1 rewrites it.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace weft::test {

inline std::vector<std::string> golden_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A line-by-line diff: "-" golden, "+" actual, for each line that differs.
inline std::string golden_diff(const std::string& expected, const std::string& actual) {
  const auto e = golden_lines(expected), a = golden_lines(actual);
  std::string out;
  for (size_t i = 0; i < std::max(e.size(), a.size()); ++i) {
    const std::string el = i < e.size() ? e[i] : "<missing>";
    const std::string al = i < a.size() ? a[i] : "<missing>";
    if (el != al) out += "line " + std::to_string(i + 1) + ":\n  - " + el + "\n  + " + al + "\n";
  }
  return out;
}

inline void expect_golden(const std::string& name, const std::string& actual) {
  const char* root = std::getenv("WEFT_SOURCE_DIR");
  const std::string path = std::string(root ? root : WEFT_SOURCE_DIR) + "/tests/golden/" + name;
  if (const char* update = std::getenv("WEFT_UPDATE_GOLDEN");
      update && std::string(update) == "1") {
    std::ofstream(path) << actual;
    return;
  }
  std::ifstream file(path);
  ASSERT_TRUE(file) << "missing golden " << path << " (WEFT_UPDATE_GOLDEN=1 writes it)";
  std::stringstream expected;
  expected << file.rdbuf();
  EXPECT_TRUE(expected.str() == actual)
      << path << " differs (- golden, + actual; WEFT_UPDATE_GOLDEN=1 rewrites it):\n"
      << golden_diff(expected.str(), actual) << "actual:\n"
      << actual;
}

}  // namespace weft::test
