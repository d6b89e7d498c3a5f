// libFuzzer target: data::parse_mmididx_index (a Megatron PREFIX.idx).
// Seeds: tests/fuzz/corpus/mmididx.

#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_target.h"
#include "weft/data/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto idx = weft::data::parse_mmididx_index(
        std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz.idx");
    if (!idx.ok()) return 0;
    const auto& i = idx.value();
    WEFT_FUZZ_EXPECT(i.num_sequences >= 0 && i.num_documents >= 0 && i.bin_bytes >= 0);
    WEFT_FUZZ_EXPECT(i.bin_bytes % weft::data::token_type_size(i.type) == 0);
  } catch (const weft::Error&) {
  }
  return 0;
}
