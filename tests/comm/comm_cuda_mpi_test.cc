// The communicators on device buffers across processes (comm/cuda), under the shared MPI test
// main: the communicator contract (conformance.h) on device buffers for the staged communicator
// over MPI with every rank on device 0 (the case: ranks sharing one GPU), with a staging
// buffer far smaller than the buffers so every collective runs in chunks; and for the NCCL
// communicator with one GPU per rank, only where there are as many GPUs as ranks (NCCL refuses two
// ranks of one communicator on one device).
//
// Every rank reaches the same verdict on skipping (the device counts are reduced over the world
// first), so no rank waits in a collective that the others skipped. Rank 0 prints the skip
// message, which makes ctest report the test as skipped (tests/comm/CMakeLists.txt).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "comm/conformance.h"
#include "comm/device_kinds.h"
#include "support/mpi_test.h"
#include "weft/comm/cuda/nccl_communicator.h"
#include "weft/comm/cuda/staged_communicator.h"
#include "weft/core/check.h"
#include "weft/kernels/cuda/arena.h"

namespace weft::comm::cuda {
namespace {

using weft::test::test_world;

constexpr const char* kNoDevice = "weft-cuda-skip: no CUDA device visible";
constexpr size_t kStagingBytes = 1024;  // far below the buffers: every collective is chunked

// The smallest device count of any rank: the same answer everywhere. Counted once (by every
// rank in the first test), since every test's kind asks.
int min_device_count() {
  static const int count = [] {
    int32_t neg = -kernels::cuda::device_count();
    test_world().all_reduce(&neg, 1, ReduceOp::Max);
    return -neg;
  }();
  return count;
}

// Each run on communicators of its own, split from the world, so a failure cannot leave the
// world unmatched. The world's size is the only group size.
test::Kind staged_kind() {
  test::Kind k;
  if (min_device_count() == 0) k.skip = kNoDevice;
  k.sizes = {test_world().size()};
  k.run = [](int, const std::string& name, const test::Body& body) {
    test::DeviceMemory memory;
    auto c =
        make_staged_communicator(test_world().split(0, test_world().rank(), name), kStagingBytes);
    body(*c, memory);
  };
  return k;
}

test::Kind nccl_kind() {
  test::Kind k;
  const int devices = min_device_count();
  const int size = test_world().size();
  if (devices == 0) {
    k.skip = kNoDevice;
  } else if (!have_nccl()) {
    k.skip = "built without NCCL";
  } else if (devices < size) {
    // Not the cuda-skip message: where the staged tests ran, the binary passed.
    k.skip =
        "the NCCL communicator needs one GPU per rank (NCCL refuses two ranks on one "
        "device): " +
        std::to_string(devices) + " visible for " + std::to_string(size) + " ranks";
  }
  k.sizes = {size};
  // Rank r on device r, its buffers too; device 0 again afterwards, for the next tests.
  k.run = [](int, const std::string& name, const test::Body& body) {
    const int rank = test_world().rank();
    WEFT_CHECK(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice(", rank, ") failed");
    try {
      test::DeviceMemory memory;
      auto bootstrap = test_world().split(0, rank, "bootstrap");
      auto c = make_nccl_communicator(*bootstrap, rank, name);
      body(*c, memory);
    } catch (...) {
      (void)cudaSetDevice(0);
      throw;
    }
    (void)cudaSetDevice(0);
  };
  test::follow_nccl_contract(k);
  return k;
}

using test::Conformance;
INSTANTIATE_TEST_SUITE_P(DeviceOverMpi, Conformance,
                         testing::Values(test::KindFactory{"StagedOnDevice0", staged_kind},
                                         test::KindFactory{"NcclOneGpuPerRank", nccl_kind}),
                         test::kind_name);

}  // namespace
}  // namespace weft::comm::cuda
