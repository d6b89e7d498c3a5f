#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11). A value is a pure function
// of (seed, stream name, index): a parameter element's initial value depends only on
// (seed, parameter name, global element index), so any shard of any layout draws exactly the
// slice of the serial model (DESIGN.md section 4).

#include <array>
#include <cstdint>
#include <string_view>

namespace weft {

// 64-bit FNV-1a of `data`, continuing from `h` (a hash of what came before).
inline uint64_t fnv1a(std::string_view data, uint64_t h = 0xcbf29ce484222325ull) {
  for (const char c : data) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// fnv1a of a name, mixed with the seed by splitmix64: the Philox key of a stream.
uint64_t stream_key(uint64_t seed, std::string_view name);

// Philox4x32-10 block for a 128-bit counter and 64-bit key.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, uint64_t key);

// Uniform in (0, 1) and standard normal for element `index` of the stream `key`.
float uniform_at(uint64_t key, uint64_t index);
float normal_at(uint64_t key, uint64_t index);

// Fills out[i] = mean + std * normal_at(key, first + i) for i in [0, n).
void fill_normal(float* out, int64_t n, uint64_t key, uint64_t first, float mean, float std);

}  // namespace weft
