// libFuzzer target: config::parse_run_config (RUN.toml and --set overrides). The input is the TOML
// text, optionally followed by a NUL byte and overrides, one per line ("train.lr=3e-4").
// Seeds: tests/fuzz/corpus/run_config and configs/runs (run from the source directory, so their
// model.config paths resolve).

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "weft/config/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string text = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    std::istringstream lines(input.substr(nul + 1));
    for (std::string line; std::getline(lines, line);) overrides.push_back(line);
  }
  try {
    auto cfg = weft::config::parse_run_config(text, "fuzz.toml", overrides);
    if (!cfg.ok()) return 0;
    const weft::config::RunConfig& c = cfg.value();
    WEFT_FUZZ_EXPECT(weft::config::validate(c).ok());
    WEFT_FUZZ_EXPECT(c.microbatches() >= 1);
    (void)c.to_json().dump();  // what a checkpoint records
  } catch (const weft::Error&) {
  }
  return 0;
}
