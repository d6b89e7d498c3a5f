#pragma once
// Number checks for command-line options, with messages a person can read. CLI11's own
// PositiveNumber and NonNegativeNumber are Range(0, DBL_MAX) underneath and print the 309 digits
// of DBL_MAX when a value is out of range ("Value -1 not in range 0.000000 to 1797693...").

#include <CLI/CLI.hpp>

#include <string>

namespace weft::cli {

// A number for which `holds` is true, `bound` saying which ("> 0"). An integer option's value is
// converted as a double here; CLI11 converts it to the option's own type after the check.
inline CLI::Validator number_check(bool (*holds)(double), const std::string& bound,
                                   const std::string& name) {
  return CLI::Validator(
      [holds, bound](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return "'" + in + "' is not a number";
        return holds(v) ? std::string() : "must be " + bound + ", got " + in;
      },
      bound, name);
}

inline const CLI::Validator kPositive =
    number_check([](double v) { return v > 0; }, "> 0", "positive");
inline const CLI::Validator kNonNegative =
    number_check([](double v) { return v >= 0; }, ">= 0", "non-negative");

}  // namespace weft::cli
