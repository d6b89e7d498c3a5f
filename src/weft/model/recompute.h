#pragma once
// Activation recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models"): none keeps every activation backward needs; selective recomputes only the
// attention core (the B*NH*T*T probabilities) in backward; full keeps only each layer's input and
// recomputes the whole layer in backward.

#include <optional>
#include <string_view>

namespace weft::model {

enum class Recompute { None, Selective, Full };

inline constexpr std::string_view recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  return "?";
}

inline std::optional<Recompute> parse_recompute(std::string_view s) {
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    if (recompute_name(r) == s) return r;
  }
  return std::nullopt;
}

}  // namespace weft::model
