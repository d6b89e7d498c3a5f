#pragma once
// --device of `weft train` and `weft bench step`:
//   cpu        (default) fp32 on the CPU kernels, any tp x pp x dp layout;
//   cuda[:N]   the GPU (device N; plain cuda: by local rank) in bf16 mixed precision:
//              kernels/cuda through kernels::Backend; the one engine's every layout on GPU ranks
//              (docs/cuda.md);
//   host-bf16  the GPU trainer's code path on the CPU, with the GPU's bf16 rounding points
//              (kernels::make_host_backend(Precision::BF16Mixed)): slow, for checking that path
//              without a GPU.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "weft/comm/communicator.h"
#include "weft/config/run_config.h"
#include "weft/kernels/backend.h"

namespace weft::cli {

// The backend --device names, with `arena_bytes` of memory for the CUDA arena
// (runtime::device_arena_bytes). Null for "cpu". Plain "cuda" under mpirun picks device
// local rank % visible devices (one process per GPU; ranks share GPUs when there are fewer).
// Throws weft::Error for an unknown device, for cuda in a weft built without CUDA, and when no GPU
// is visible.
std::unique_ptr<kernels::Backend> make_device(const std::string& device, int64_t arena_bytes);

// make_device for this rank of `cfg`'s job (`world` null: one process), its arena of its size.
std::unique_ptr<kernels::Backend> make_device(const std::string& device,
                                              const config::RunConfig& cfg,
                                              comm::Communicator* world);

// The precision the trainer computes in on `device`: FP32 on the CPU, BF16Mixed on a device
// (cuda[:N], host-bf16). Throws weft::Error for a name that is none of those.
Precision device_precision(const std::string& device);

// runtime::TrainerOptions::device_group for --device: how a device's ranks reach each other's
// memory. cuda: pipeline boundaries over the staged communicator (comm/cuda: device buffers
// through pinned host memory over MPI; its eager sends are what the pipeline runner needs, which
// NCCL's order-matched point-to-point is not); gradients and the tied embedding over NCCL when
// every rank has a GPU of its own and NCCL was built, else staged too. Both run on `backend`'s
// stream, so each operation comes after the kernels queued before it. Null (the host groups
// themselves) for host-bf16.
std::function<std::unique_ptr<comm::Communicator>(comm::Communicator&)> device_group_maker(
    const std::string& device, const kernels::Backend& backend);

// The --device option's help text.
inline constexpr const char* kDeviceHelp =
    "cpu (fp32) | cuda[:N] (GPU, bf16 mixed precision) | host-bf16 (the GPU path emulated on "
    "the CPU, for checks); any layout under mpirun";

}  // namespace weft::cli
