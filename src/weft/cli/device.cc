#include "weft/cli/device.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>

#include "weft/core/check.h"
#include "weft/layout/rank.h"
#include "weft/parallel/topology.h"
#include "weft/runtime/engine.h"
#ifdef WEFT_HAVE_CUDA
#include "weft/comm/cuda/nccl_communicator.h"
#include "weft/comm/cuda/staged_communicator.h"
#include "weft/kernels/cuda/arena.h"
#include "weft/kernels/cuda/mixed_backend.h"
#endif

namespace weft::cli {

namespace {

// This process's rank among the job's processes on its node, and their number (Open MPI's
// variables; one process without them).
int local_env(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::max(0, std::atoi(v)) : fallback;
}
int local_rank() { return local_env("OMPI_COMM_WORLD_LOCAL_RANK", 0); }
[[maybe_unused]] int local_size() {  // the CUDA build's (device_group_maker)
  return std::max(1, local_env("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
}

bool is_cuda(const std::string& device) {
  return device == "cuda" || device.rfind("cuda:", 0) == 0;
}

// The GPU --device names: cuda:N, or (plain cuda) local rank % visible devices.
int cuda_index(const std::string& device, int visible) {
  if (device.size() <= 5) return visible > 0 ? local_rank() % visible : -1;
  try {
    size_t used = 0;
    const int index = std::stoi(device.substr(5), &used);
    if (used == device.size() - 5 && index >= 0) return index;
  } catch (const std::exception&) {
  }
  throw Error(fmt::format("--device {}: expected cuda or cuda:N with N a device number", device));
}

}  // namespace

Precision device_precision(const std::string& device) {
  if (device == "cpu") return Precision::FP32;
  if (device == "host-bf16") return Precision::BF16Mixed;
  if (is_cuda(device)) {
    cuda_index(device, 1);  // a malformed cuda:N is that error
    return Precision::BF16Mixed;
  }
  throw Error(fmt::format("--device must be cpu, cuda[:N] or host-bf16, not '{}'", device));
}

std::unique_ptr<kernels::Backend> make_device(const std::string& device, int64_t arena_bytes) {
  // An unknown name, or a malformed cuda:N, is device_precision's error.
  if (device_precision(device) == Precision::FP32) return nullptr;
  if (device == "host-bf16") return kernels::make_host_backend(Precision::BF16Mixed);
#ifdef WEFT_HAVE_CUDA
  const int visible = kernels::cuda::device_count();
  const int index = cuda_index(device, visible);
  if (index < 0 || index >= visible) {
    throw Error(
        fmt::format("--device {}: {} CUDA device(s) visible to this process (check nvidia-smi and "
                    "CUDA_VISIBLE_DEVICES)",
                    device, visible));
  }
  return kernels::cuda::make_mixed_backend(arena_bytes, index);
#else
  (void)arena_bytes;
  throw Error(fmt::format(
      "--device {}: this weft was built without CUDA (configure with nvcc available, or "
      "-DWEFT_CUDA=ON -DCMAKE_CUDA_COMPILER=/path/to/nvcc; docs/cuda.md)",
      device));
#endif
}

std::unique_ptr<kernels::Backend> make_device(const std::string& device,
                                              const config::RunConfig& cfg,
                                              comm::Communicator* world) {
  if (device == "cpu") return nullptr;
  const int pp_rank = parallel::Topology(cfg.parallel.grid()).coord(world ? world->rank() : 0).pp;
  return make_device(device,
                     runtime::device_arena_bytes(
                         cfg.model, runtime::run_schedule(cfg).value_or_throw("invalid pipeline"),
                         layout::rank_shape(cfg.parallel, cfg.train.seq_len, pp_rank)));
}

std::function<std::unique_ptr<comm::Communicator>(comm::Communicator&)> device_group_maker(
    const std::string& device, const kernels::Backend& backend) {
  if (!is_cuda(device)) return nullptr;
#ifdef WEFT_HAVE_CUDA
  const int visible = kernels::cuda::device_count();
  const int index = cuda_index(device, visible);
  // Plain "cuda" gives each rank of a node its own GPU when there are enough (cuda:N shares one).
  const bool own_gpu = device == "cuda" && local_size() <= visible && comm::cuda::have_nccl();
  CUstream_st* stream = backend.cuda_stream();
  return [index, own_gpu, stream](comm::Communicator& host) -> std::unique_ptr<comm::Communicator> {
    if (own_gpu && host.name() != "pp") {
      // NCCL on its own stream, ordered against the backend's by events: reductions overlap the
      // backward's kernels.
      return comm::cuda::make_nccl_communicator(host, index, host.name(), stream);
    }
    return comm::cuda::make_staged_communicator(host.split(0, host.rank(), host.name()),
                                                comm::cuda::kDefaultStagingBytes, stream);
  };
#else
  (void)backend;
  return nullptr;
#endif
}

}  // namespace weft::cli
