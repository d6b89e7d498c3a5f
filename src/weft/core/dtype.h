#pragma once
// Element types. Compute on CPU is fp32 (bf16 GEMM inputs with fp32 accumulation are an opt-in,
// kernels::MatmulPrecision); bf16 is the GPU path's storage type (weights and activations in 16
// bits, fp32 master weights), fp16 one a checkpoint import may read.

#include <bit>
#include <cmath>
#include <cstdint>

namespace weft {

// A training run's precision policy, one enum for the backends (kernels/backend.h), the memory
// model and the planner: FP32 everywhere, or bf16 activations and GEMM inputs with fp32 master
// weights, gradients and AdamW state (Micikevicius et al. 2018, "Mixed Precision Training").
enum class Precision { FP32, BF16Mixed };

// bfloat16: the top 16 bits of an IEEE float; conversion rounds to nearest even, NaN stays NaN.
struct BF16 {
  uint16_t bits = 0;
  static BF16 from_float(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if (std::isnan(f)) return BF16{static_cast<uint16_t>((u >> 16) | 0x40)};
    u += 0x7FFF + ((u >> 16) & 1);
    return BF16{static_cast<uint16_t>(u >> 16)};
  }
  float to_float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
};

// IEEE half precision, round to nearest even, with subnormals, infinities and NaN.
struct F16 {
  uint16_t bits = 0;
  static F16 from_float(float f) {
    uint32_t x = std::bit_cast<uint32_t>(f);
    uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7FFFFFFF;
    if (ax >= 0x7F800000)
      return F16{static_cast<uint16_t>(sign | (ax > 0x7F800000 ? 0x7E00 : 0x7C00))};
    if (ax >= 0x477FF000) return F16{static_cast<uint16_t>(sign | 0x7C00)};  // overflow to inf
    if (ax < 0x38800000) {  // result is subnormal or zero: scale into the subnormal grid
      float a = std::bit_cast<float>(ax);
      uint32_t m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));  // a / 2^-24
      return F16{static_cast<uint16_t>(sign | m)};
    }
    uint32_t mant_odd = (ax >> 13) & 1;
    ax += 0xC8000FFF + mant_odd;  // rebias exponent (127 -> 15) and round to nearest even
    return F16{static_cast<uint16_t>(sign | (ax >> 13))};
  }
  float to_float() const {
    uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
    uint32_t exp = (bits >> 10) & 0x1F;
    uint32_t mant = bits & 0x3FF;
    if (exp == 0) {
      float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24
      return sign ? -v : v;
    }
    if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000 | (mant << 13));
    return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

}  // namespace weft
