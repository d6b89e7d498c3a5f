#pragma once
// "Did you mean ...?" for misspelled names (config keys, commands): Levenshtein distance.

#include <string>
#include <string_view>
#include <vector>

namespace weft {

int edit_distance(std::string_view a, std::string_view b);
// " (did you mean 'n_embd'?)" for the nearest candidate within a small distance, else "".
std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace weft
