#pragma once
// Reading a TOML config (a model, a cluster preset, a run) the one way: a syntax error with its
// file and line, typed reads that name the key of a wrong type, required keys, and unknown keys
// with the nearest known one. Problems are added to a weft::Status, so a file's are reported
// together.

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "weft/core/status.h"

namespace weft {

// The document, or "<origin>: TOML syntax error at line N: <what>".
Result<toml::table> parse_toml(const std::string& text, const std::string& origin);

// Writes node's value to out when it has T's type (int, int64_t: an integer in T's range, never a
// float, which toml++ 3.3 would cast out of range; double: a number a double holds exactly;
// std::string; bool); else adds "<name> must be a number" (etc.) or "<name>=<v> is out of range".
// A null node (an absent key) leaves out alone. Returns whether out was written.
template <typename T>
bool read_toml(const toml::node* node, const std::string& name, T& out, Status& s);

// The keys of t that are not in known, in t's order.
std::vector<std::string> unknown_keys(const toml::table& t, const std::vector<std::string>& known);

// One table of a config, named by its path ("model", "link.node") in messages; t == nullptr is an
// absent table, whose reads return their fallbacks. Every key read is known.
class TomlReader {
 public:
  TomlReader(const toml::table* t, std::string path, Status& s)
      : t_(t), path_(std::move(path)), s_(s) {}

  // The key's value; fallback when it is absent ("missing key <path>.<key>" if required) or wrong.
  template <typename T>
  T get(const char* key, T fallback, bool required = false) {
    known_.emplace_back(key);
    if (t_ == nullptr) return fallback;
    const toml::node* node = t_->get(key);
    if (node == nullptr && required) s_.add("missing key " + path_ + "." + key);
    read_toml(node, path_ + "." + key, fallback, s_);
    return fallback;
  }
  // Keys read some other way (a sub-table, a key with rules of its own).
  void known(std::initializer_list<const char*> keys) {
    known_.insert(known_.end(), keys.begin(), keys.end());
  }
  // "unknown key <path>.<key> (did you mean '<known>'?)" for each key not read or known so far.
  void report_unknown();

  const std::string& path() const { return path_; }

 private:
  const toml::table* t_;
  std::string path_;
  Status& s_;
  std::vector<std::string> known_;
};

}  // namespace weft
