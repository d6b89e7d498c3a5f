#include "weft/core/toml_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <type_traits>
#include <utility>

#include "weft/core/suggest.h"

namespace weft {

Result<toml::table> parse_toml(const std::string& text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return Status::error(fmt::format("{}: TOML syntax error at line {}: {}", origin,
                                     e.source().begin.line, e.description()));
  }
}

template <typename T>
bool read_toml(const toml::node* node, const std::string& name, T& out, Status& s) {
  if (node == nullptr) return false;
  std::optional<T> v;
  if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) {
    if (const toml::value<int64_t>* i = node->as_integer()) {
      if (!std::in_range<T>(i->get())) {
        s.add(fmt::format("{}={} is out of range", name, i->get()));
        return false;
      }
      v = static_cast<T>(i->get());
    }
  } else if constexpr (std::is_same_v<T, bool>) {
    if (const toml::value<bool>* b = node->as_boolean()) v = b->get();  // value<bool>() takes 1
  } else {
    v = node->value<T>();  // double: any number a double holds exactly; std::string: a string
  }
  if (v) out = *v;
  constexpr const char* kExpected = std::is_same_v<T, bool>          ? "true or false"
                                    : std::is_same_v<T, double>      ? "a number"
                                    : std::is_same_v<T, std::string> ? "a string"
                                                                     : "an integer";
  if (!v) s.add(fmt::format("{} must be {}", name, kExpected));
  return v.has_value();
}

template bool read_toml(const toml::node*, const std::string&, int&, Status&);
template bool read_toml(const toml::node*, const std::string&, int64_t&, Status&);
template bool read_toml(const toml::node*, const std::string&, double&, Status&);
template bool read_toml(const toml::node*, const std::string&, std::string&, Status&);
template bool read_toml(const toml::node*, const std::string&, bool&, Status&);

std::vector<std::string> unknown_keys(const toml::table& t, const std::vector<std::string>& known) {
  std::vector<std::string> unknown;
  for (const auto& [key, node] : t) {
    if (std::ranges::find(known, key.str()) == known.end()) unknown.emplace_back(key.str());
  }
  return unknown;
}

void TomlReader::report_unknown() {
  if (t_ == nullptr) return;
  for (const std::string& k : unknown_keys(*t_, known_)) {
    s_.add(fmt::format("unknown key {}.{}{}", path_, k, did_you_mean(k, known_)));
  }
}

}  // namespace weft
