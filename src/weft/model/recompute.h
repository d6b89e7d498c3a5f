#pragma once
// Activation recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models"): none keeps every activation backward needs; selective recomputes only the
// attention core (the B*NH*T*T probabilities) in backward; full keeps only each layer's input and
// recomputes the whole layer in backward.

#include <optional>
#include <string_view>

namespace weft::model {

enum class Recompute { None, Selective, Full };

inline constexpr std::string_view kRecomputeNames[] = {"none", "selective", "full"};  // in order

inline constexpr std::string_view recompute_name(Recompute r) {
  return kRecomputeNames[static_cast<int>(r)];
}

inline std::optional<Recompute> parse_recompute(std::string_view s) {
  for (int i = 0; i < 3; ++i) {
    if (kRecomputeNames[i] == s) return static_cast<Recompute>(i);
  }
  return std::nullopt;
}

}  // namespace weft::model
