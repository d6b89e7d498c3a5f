// libFuzzer target: checkpoint::parse_safetensors (a whole model.safetensors image).
// Seeds: tests/fuzz/corpus/safetensors.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_target.h"
#include "weft/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto h = weft::checkpoint::parse_safetensors(bytes, "fuzz.safetensors");
    if (!h.ok()) return 0;
    // The tensors tile the buffer: reading one never leaves the file.
    int64_t at = 0;
    for (const auto& t : h.value().tensors) {
      WEFT_FUZZ_EXPECT(t.begin == at && t.end >= t.begin);
      at = t.end;
    }
    WEFT_FUZZ_EXPECT(at == h.value().buffer_bytes);
    WEFT_FUZZ_EXPECT(h.value().data_start() + at == static_cast<int64_t>(size));
  } catch (const weft::Error&) {
  }
  return 0;
}
