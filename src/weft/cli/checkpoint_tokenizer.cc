#include "weft/cli/checkpoint_tokenizer.h"

#include <fmt/format.h>

#include <filesystem>
#include <vector>

namespace weft::cli {

CheckpointTokenizer load_checkpoint_tokenizer(const std::string& checkpoint_dir,
                                              const checkpoint::Metadata& md,
                                              const std::string& override_spec) {
  namespace fs = std::filesystem;
  const std::string recorded = md.train.tokenizer;
  if (override_spec.empty() && (recorded.empty() || recorded == "none")) return {};
  std::vector<std::string> tried;
  if (!override_spec.empty()) {
    tried.push_back(data::resolve_tokenizer_dir(override_spec));
  } else {
    tried.push_back(data::resolve_tokenizer_dir(recorded));
    tried.push_back((fs::path(checkpoint_dir).parent_path() / "tokenizer").string());
  }
  std::string problems;
  for (const std::string& dir : tried) {
    auto tok = data::BpeTokenizer::load(dir);
    if (!tok.ok()) {
      for (const std::string& p : tok.status().problems()) problems += "\n  - " + p;
      continue;
    }
    if (!md.train.tokenizer_identity.empty() &&
        tok.value().identity() != md.train.tokenizer_identity) {
      problems += fmt::format("\n  - {} is tokenizer {}, but {} was trained with {}", dir,
                              tok.value().identity(), checkpoint_dir, md.train.tokenizer_identity);
      continue;
    }
    return {dir, std::move(tok).value()};
  }
  throw Error(
      fmt::format("cannot load the tokenizer of {} (recorded: '{}'){}\n"
                  "pass --tokenizer gpt2|DIR with the tokenizer the model was trained with",
                  checkpoint_dir, recorded, problems));
}

}  // namespace weft::cli
