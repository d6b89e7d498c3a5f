#include "weft/layout/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <ranges>
#include <string>
#include <utility>
#include <vector>

#include "weft/core/suggest.h"

namespace weft::layout {

namespace {

// The keys whose value is an integer field.
constexpr std::pair<std::string_view, int Layout::*> kIntKeys[] = {
    {"tp", &Layout::tp}, {"pp", &Layout::pp},          {"dp", &Layout::dp},
    {"vp", &Layout::vp}, {"mb", &Layout::micro_batch}, {"zero", &Layout::zero}};

}  // namespace

Result<Layout> parse(std::string_view text, int world) {
  Layout c;
  Status s;
  bool dp_given = false;
  const std::vector<std::string> keys = {"tp",       "pp",        "dp", "vp",  "mb",
                                         "schedule", "recompute", "sp", "zero"};
  for (const auto part : text | std::views::split(',')) {
    std::string_view item(part.begin(), part.end());
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;  // "" (or a trailing comma): the defaults
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      s.add(fmt::format("'{}' is not key=value", item));
      continue;
    }
    const std::string key(item.substr(0, eq));
    const std::string_view value = item.substr(eq + 1);
    auto integer = [&](int& out) {
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
      if (ec != std::errc() || end != value.data() + value.size()) {
        s.add(fmt::format("{}={} must be an integer", key, value));
      }
    };
    const auto field = std::find_if(std::begin(kIntKeys), std::end(kIntKeys),
                                    [&](const auto& k) { return k.first == key; });
    if (field != std::end(kIntKeys)) {
      integer(c.*field->second);
      dp_given = dp_given || key == "dp";
    } else if (key == "sp") {
      int v = 0;
      integer(v);
      c.sequence_parallel = v != 0;
    } else if (key == "schedule") {
      if (auto k = schedule::parse_kind(value); k.ok()) {
        c.schedule = k.value();
      } else {
        s.merge(k.status());
      }
    } else if (key == "recompute") {
      if (auto r = model::parse_recompute(value)) {
        c.recompute = *r;
      } else {
        s.add(fmt::format("recompute={} must be none, selective or full", value));
      }
    } else {
      s.add(fmt::format("unknown key '{}'{}", key, did_you_mean(key, keys)));
    }
  }
  if (!dp_given && world > 0 && c.tp > 0 && c.pp > 0) {
    if (world % (c.tp * c.pp) != 0) {
      s.add(fmt::format("world {} is not divisible by tp*pp = {}", world, c.tp * c.pp));
    } else {
      c.dp = world / (c.tp * c.pp);
    }
  }
  if (!s.ok()) return s;
  return c;
}

std::string to_string(const Layout& c) {
  return fmt::format("tp={},pp={},dp={},vp={},mb={},schedule={},recompute={},sp={},zero={}", c.tp,
                     c.pp, c.dp, c.vp, c.micro_batch, schedule::kind_name(c.schedule),
                     model::recompute_name(c.recompute), c.sequence_parallel ? 1 : 0, c.zero);
}

std::string short_name(const Layout& c) {
  std::string out = fmt::format("tp{} pp{} dp{}", c.tp, c.pp, c.dp);
  if (c.vp > 1) out += fmt::format(" vp{}", c.vp);
  out += fmt::format(" mb{} {} {}", c.micro_batch, schedule::kind_name(c.schedule),
                     model::recompute_name(c.recompute));
  if (c.sequence_parallel) out += " sp";
  if (c.zero > 0) out += fmt::format(" z{}", c.zero);
  return out;
}

}  // namespace weft::layout
