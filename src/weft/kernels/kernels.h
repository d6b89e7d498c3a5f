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

}  // namespace weft::kernels
