#pragma once
// The kernels of weft. `weft::kernels::cpu` is the optimized CPU backend (OpenMP + oneDNN GEMM);
// `weft::kernels::ref` (tests/support/kernel_reference.h) holds readable reference templates every
// fast kernel is tested against. The op list is ops.inc.

#include <cmath>
#include <cstdint>

namespace weft::kernels {

// A normalization layer's kind and epsilon (model.norm, model.norm_eps).
struct Norm {
  bool rms = false;  // RMSNorm (Zhang & Sennrich 2019); else LayerNorm (Ba et al. 2016)
  float eps = 1e-5f;
};

// Rotary embeddings (Backend::rope): the rotation angle of pair i of a head of size HS is
// t * rope_inv_freq(theta, i, HS) at position t, theta^(-2i/HS) computed in double. Every backend
// forms its angles from this one expression (the CUDA backend passes the values to its kernel),
// so that their cos and sin, rounded to float, agree.
inline double rope_inv_freq(float theta, int i, int HS) {
  return std::pow(static_cast<double>(theta), -2.0 * i / HS);
}

namespace cpu {
#include "weft/kernels/ops.inc"
}  // namespace cpu

// Threads used by this process's kernels (OpenMP and oneDNN share the OpenMP pool). When several
// ranks share the cores, give each rank cores / ranks threads.
void set_num_threads(int n);
int num_threads();

// Process-wide precision of the linear layers' GEMMs (matmul_forward / matmul_backward), like
// PyTorch's torch.set_float32_matmul_precision. F32 (the default): fp32 GEMMs. BF16: the GEMM
// inputs are rounded to bfloat16 (round to nearest even) and their products accumulated in fp32;
// outputs, all weights and the optimizer state stay fp32 (mixed precision as in Micikevicius et
// al. 2018, "Mixed Precision Training", and Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep
// Learning Training"). About twice the fp32 GEMM rate on CPUs with avx512_bf16
// (docs/gemm-backend.md). The reference kernels and every equivalence test use F32.
enum class MatmulPrecision { F32, BF16 };
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();

// What a training process holds for its kernels beyond its model's buffers (the runtime term of
// model::estimate_rank_memory): oneDNN's JIT-generated kernels, the code pages a step touches,
// the trainer's small heap blocks. oneDNN JITs the kernels of the instruction set it dispatches
// to, so the figure is the host's: measured with oneDNN 2.6 from a tiny GPT's 4-rank `weft train`
// (tests/runtime/train_memory_test.cc), 7.5 MiB on AVX-512 hosts (2026-12-01; JIT
// code 3,456 KiB of it) and 4.9 MiB on an AVX2-only one (2026-12-03).
constexpr int64_t kRuntimeBytesAvx512 = int64_t{7680} << 10;
constexpr int64_t kRuntimeBytesAvx2 = int64_t{4992} << 10;
// This host's: kRuntimeBytesAvx512 where oneDNN runs avx512_core kernels, else kRuntimeBytesAvx2.
int64_t host_runtime_bytes();

}  // namespace weft::kernels
