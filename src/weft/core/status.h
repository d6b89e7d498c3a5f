#pragma once
// Status and Result<T> for boundaries a user touches (configs, data files, checkpoints, plans).
// A Status carries every problem found, so validation reports them together:
//   Status s; if (C % NH) s.add("C=768 is not divisible by NH=5"); ... return s;

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/check.h"

namespace weft {

class Status {
 public:
  Status() = default;
  static Status error(std::string problem) {
    Status s;
    s.add(std::move(problem));
    return s;
  }

  void add(std::string problem) { problems_.push_back(std::move(problem)); }
  void merge(const Status& other) {
    problems_.insert(problems_.end(), other.problems_.begin(), other.problems_.end());
  }
  bool ok() const { return problems_.empty(); }
  // The same problems, each as "<prefix>: <problem>" (prefix: the file they come from).
  Status prefixed(const std::string& prefix) const {
    Status s;
    for (const auto& p : problems_) s.add(prefix + ": " + p);
    return s;
  }
  const std::vector<std::string>& problems() const { return problems_; }
  // The first `max` problems, then "... and N more problems": a broken input would otherwise
  // print thousands of lines.
  Status capped(size_t max) const {
    if (problems_.size() <= max) return *this;
    Status s;
    s.problems_.assign(problems_.begin(), problems_.begin() + static_cast<std::ptrdiff_t>(max));
    s.add("... and " + std::to_string(problems_.size() - max) + " more problems");
    return s;
  }

  // All problems, one per line, under a heading such as "invalid model config (gpt2.toml)".
  std::string message(const std::string& heading = "") const {
    std::string out = heading;
    for (const auto& p : problems_) {
      if (!out.empty()) out += "\n";
      out += (heading.empty() ? "" : "  - ") + p;
    }
    return out;
  }
  // Throws weft::Error with message(heading) unless ok().
  void throw_if_error(const std::string& heading = "") const {
    if (!ok()) throw Error(message(heading));
  }

 private:
  std::vector<std::string> problems_;
};

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {
    WEFT_CHECK(!status_.ok(), "a Result built from a Status must carry an error");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  const T& value() const& {
    WEFT_CHECK(ok(), status_.message());
    return *value_;
  }
  T&& value() && {
    WEFT_CHECK(ok(), status_.message());
    return std::move(*value_);
  }
  // The value, or throws weft::Error listing every problem under `heading`.
  T value_or_throw(const std::string& heading = "") && {
    status_.throw_if_error(heading);
    return std::move(*value_);
  }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace weft
