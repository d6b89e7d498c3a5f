#pragma once
// Number checks for command-line options, with messages a person can read. CLI11's own
// PositiveNumber and NonNegativeNumber are Range(0, DBL_MAX) underneath and print the 309 digits
// of DBL_MAX when a value is out of range ("Value -1 not in range 0.000000 to 1797693...").

#include <CLI/CLI.hpp>

#include <string>

namespace weft::cli {

// A number > 0 (an integer option's value is converted as a double here; CLI11 converts it to
// the option's own type after the check).
inline const CLI::Validator kPositive(
    [](std::string& in) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(in, v)) return "'" + in + "' is not a number";
      return v > 0 ? std::string() : "must be > 0, got " + in;
    },
    "> 0", "positive");

// A number >= 0.
inline const CLI::Validator kNonNegative(
    [](std::string& in) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(in, v)) return "'" + in + "' is not a number";
      return v >= 0 ? std::string() : "must be >= 0, got " + in;
    },
    ">= 0", "non-negative");

}  // namespace weft::cli
