#pragma once
// The kernels of weft. `weft::kernels::cpu` is the optimized CPU backend (OpenMP + oneDNN GEMM);
// `weft::kernels::ref` (cpu/reference.h) holds readable reference templates every fast kernel
// is tested against. The op list is ops.inc.

#include <cstdint>

namespace weft::kernels {

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

}  // namespace weft::kernels
