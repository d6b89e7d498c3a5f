#pragma once
// The GPU implementation of kernels::Backend (kernels/backend.h): every op forwards to the
// bf16 kernels of kernels_cuda.h, all on one non-blocking stream of the backend's own, with one
// cuBLASLt Context on that stream. Memory is one Arena (a single cudaMalloc) sized at
// construction; allocate() hands out bump-allocated blocks of it until the backend is destroyed.
// The calls that return host values (download, sum_squares) and upload/zero-then-read patterns
// are ordered by that one stream, so a caller needs no synchronization of its own.
//
// No CUDA headers here: the trainer and the tests include this from plain C++.

#include <cstdint>
#include <memory>

#include "weft/kernels/backend.h"

namespace weft::kernels::cuda {

// A backend on CUDA device `device` with `arena_bytes` of device memory for allocate(); the
// cuBLASLt workspace and the scratch area of its Context come on top (Context::kDefaultWorkspace
// + kDefaultScratch, about 96 MiB). Throws weft::Error when there is no such device or the memory
// cannot be had.
std::unique_ptr<Backend> make_mixed_backend(int64_t arena_bytes, int device = 0);

}  // namespace weft::kernels::cuda
