// libFuzzer target: checkpoint::parse_metadata (a checkpoint's metadata.json).
// Seeds: tests/fuzz/corpus/checkpoint_metadata.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_target.h"
#include "weft/checkpoint/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto md = weft::checkpoint::parse_metadata(text, "metadata.json");
    if (!md.ok()) return 0;
    const weft::checkpoint::Metadata& m = md.value();
    // Every tensor lies inside a listed shard, so load() reads no byte outside a file.
    for (const auto& t : m.tensors) {
      bool inside = false;
      for (const auto& s : m.shards) {
        inside |= s.file == t.file && t.offset >= 0 && t.count * 4 <= s.bytes - t.offset;
      }
      WEFT_FUZZ_EXPECT(inside);
      // ...and its elements lie inside its tensor-parallel shard.
      WEFT_FUZZ_EXPECT(t.begin >= 0 && t.count >= 0 &&
                       t.begin + t.count <= weft::numel(t.shard_shape()));
    }
    // What save() would write reads back as the same metadata.
    const auto text2 = weft::checkpoint::metadata_to_json(m).dump();
    auto again = weft::checkpoint::parse_metadata(text2, "metadata.json");
    WEFT_FUZZ_EXPECT(again.ok());
    WEFT_FUZZ_EXPECT(weft::checkpoint::metadata_to_json(again.value()).dump() == text2);
  } catch (const weft::Error&) {
  }
  return 0;
}
