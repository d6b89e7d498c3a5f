#include "weft/core/rng.h"

#include <cmath>
#include <numbers>

namespace weft {

uint64_t stream_key(uint64_t seed, std::string_view name) {
  uint64_t z = fnv1a(name) ^ (seed + 0x9e3779b97f4a7c15ull);  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ k0, static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

namespace {
std::array<uint32_t, 4> block_at(uint64_t key, uint64_t index) {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0}, key);
}
// 23 random bits to a float strictly inside (0, 1): (k + 0.5) / 2^23 needs at most 24 significant
// bits, so it is exact and at most 1 - 2^-24. (With 24 bits, k + 0.5 rounds for k >= 2^23 and the
// top bucket became exactly 1.0f.)
float to_unit(uint32_t x) { return ((x >> 9) + 0.5f) * (1.0f / 8388608.0f); }
}  // namespace

float uniform_at(uint64_t key, uint64_t index) { return to_unit(block_at(key, index)[0]); }

float normal_at(uint64_t key, uint64_t index) {
  auto r = block_at(key, index);
  // Box-Muller in double so the value does not depend on the compiler's float contraction.
  double u1 = (static_cast<double>(r[0]) + 0.5) / 4294967296.0;
  double u2 = (static_cast<double>(r[1]) + 0.5) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

void fill_normal(float* out, int64_t n, uint64_t key, uint64_t first, float mean, float std) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = mean + std * normal_at(key, first + static_cast<uint64_t>(i));
  }
}

}  // namespace weft
