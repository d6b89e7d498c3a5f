// libFuzzer target: model::parse_gpt_config (the [model] table of a model or run TOML).
// Seeds: tests/fuzz/corpus/model_config and configs/models.

#include <cstddef>
#include <cstdint>
#include <string>

#include <toml++/toml.h>

#include "fuzz_target.h"
#include "weft/model/gpt_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    auto cfg = weft::model::parse_gpt_config(text, "fuzz.toml");
    if (!cfg.ok()) return 0;
    const weft::model::GptConfig& c = cfg.value();
    // An accepted config is one the rest of weft computes with: it validates, and its derived
    // sizes (the padded vocabulary, the head size) are computed without overflow (UBSan).
    WEFT_FUZZ_EXPECT(weft::model::validate(c).ok());
    WEFT_FUZZ_EXPECT(c.padded_vocab() >= c.vocab_size && c.head_size() > 0);
    // What was accepted is what was written: no integer was cut to fit an int.
    const toml::table root = toml::parse(text, std::string_view("fuzz.toml"));
    const std::pair<const char*, int> fields[] = {{"n_layer", c.n_layer},
                                                  {"n_embd", c.n_embd},
                                                  {"n_head", c.n_head},
                                                  {"vocab_size", c.vocab_size},
                                                  {"pad_vocab_to", c.pad_vocab_to},
                                                  {"max_seq_len", c.max_seq_len}};
    for (const auto& [key, value] : fields) {
      if (auto* v = root["model"][key].as_integer()) WEFT_FUZZ_EXPECT(v->get() == value);
    }
  } catch (const weft::Error&) {
  }
  return 0;
}
