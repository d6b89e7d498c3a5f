#pragma once
// Paths of the committed presets, for the planner's tests.

#include <string>

namespace weft::planner::test {

inline std::string source_path(const std::string& relative) {
  return std::string(WEFT_SOURCE_DIR) + "/" + relative;
}

}  // namespace weft::planner::test
