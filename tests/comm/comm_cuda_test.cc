// The communicators on device buffers (comm/cuda) in one process, at size 1: the NCCL
// communicator bootstrapped from the Local one, and the staged communicator over the Local one
// with a staging buffer far smaller than the buffers (1 KiB against up to 80 KB), so every
// collective runs in chunks. The communicator contract (conformance.h) runs on device buffers,
// checked by copying back; then what is NCCL's or the staged communicator's own.
//
// Needs a GPU: every test skips where none is visible, with the message that makes ctest report
// the binary as skipped (tests/comm/CMakeLists.txt). The 2- and 4-rank runs are
// comm_cuda_mpi_test.cc.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/conformance.h"
#include "comm/device_kinds.h"
#include "weft/comm/cuda/nccl_communicator.h"
#include "weft/comm/cuda/staged_communicator.h"
#include "weft/core/check.h"
#include "weft/core/dtype.h"
#include "weft/kernels/cuda/arena.h"

namespace weft::comm::cuda {
namespace {

constexpr const char* kNoDevice = "weft-cuda-skip: no CUDA device visible";
constexpr size_t kStagingBytes = 1024;
constexpr int64_t kN = 10000;  // 40000 bytes of f32: 40 chunks of the staging buffer

enum class Backend { Nccl, Staged };

// Exact in every type used here, different at every index.
template <typename T>
std::vector<T> ramp(int64_t n, int offset = 0) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<T>((i + offset) % 1000 - 300);
  return v;
}

// Counted once: every test's kind asks.
int devices() {
  static const int count = kernels::cuda::device_count();
  return count;
}

test::Kind staged_kind() {
  test::Kind k;
  if (devices() == 0) k.skip = kNoDevice;
  k.sizes = {1};
  k.run = [](int, const std::string& name, const test::Body& body) {
    test::DeviceMemory memory;
    auto c = make_staged_communicator(make_local_communicator(name), kStagingBytes);
    body(*c, memory);
  };
  return k;
}

test::Kind nccl_kind() {
  test::Kind k;
  if (devices() == 0) {
    k.skip = kNoDevice;
  } else if (!have_nccl()) {
    k.skip = "built without NCCL";
  }
  k.sizes = {1};
  k.run = [](int, const std::string& name, const test::Body& body) {
    test::DeviceMemory memory;
    auto local = make_local_communicator(name);
    auto c = make_nccl_communicator(*local, 0, name);
    body(*c, memory);
  };
  test::follow_nccl_contract(k);
  return k;
}

using test::Conformance;
INSTANTIATE_TEST_SUITE_P(Device, Conformance,
                         testing::Values(test::KindFactory{"Staged", staged_kind},
                                         test::KindFactory{"Nccl", nccl_kind}),
                         test::kind_name);

// What the contract leaves open and these two do at size 1 over the Local communicator.
class DeviceComm : public testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (kernels::cuda::device_count() == 0) GTEST_SKIP() << kNoDevice;
    if (GetParam() == Backend::Nccl && !have_nccl()) GTEST_SKIP() << "built without NCCL";
    arena_ = std::make_unique<kernels::cuda::Arena>(size_t{64} << 20);
    comm_ = make(*make_local_communicator("world"));
  }

  std::unique_ptr<Communicator> make(Communicator& local) {
    if (GetParam() == Backend::Nccl) return make_nccl_communicator(local, 0, local.name());
    return make_staged_communicator(make_local_communicator(local.name()), kStagingBytes);
  }

  template <typename T>
  T* upload(const std::vector<T>& v) {
    T* d = arena_->allocate<T>(std::max<int64_t>(1, static_cast<int64_t>(v.size())));
    kernels::cuda::copy_to_device(d, v.data(), v.size() * sizeof(T));
    return d;
  }
  template <typename T>
  std::vector<T> download(const T* d, int64_t n) {
    std::vector<T> v(static_cast<size_t>(n));
    kernels::cuda::copy_to_host(v.data(), d, v.size() * sizeof(T));
    return v;
  }

  std::unique_ptr<kernels::cuda::Arena> arena_;
  std::unique_ptr<Communicator> comm_;
};

std::string backend_name(const testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::Nccl ? "Nccl" : "Staged";
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceComm, testing::Values(Backend::Nccl, Backend::Staged),
                         backend_name);

TEST_P(DeviceComm, SendToTheOnlyRankThrows) {
  float* d = upload(std::vector<float>(4, 1.0f));
  EXPECT_THROW(comm_->send(d, 4, 0), Error);
  EXPECT_THROW(comm_->recv(d, 4, 0), Error);
}

// ---- NCCL only ----

class NcclComm : public DeviceComm {};
INSTANTIATE_TEST_SUITE_P(Backends, NcclComm, testing::Values(Backend::Nccl), backend_name);

TEST_P(NcclComm, RefusesADeviceThatIsNotThere) {
  auto local = make_local_communicator();
  EXPECT_THROW(make_nccl_communicator(*local, kernels::cuda::device_count(), "world"), Error);
}

// ---- staged only ----

class StagedComm : public DeviceComm {};
INSTANTIATE_TEST_SUITE_P(Backends, StagedComm, testing::Values(Backend::Staged), backend_name);

TEST_P(StagedComm, SaysWhenTheStagingBufferCannotHoldARow) {
  // A reduce-scatter chunk of one row needs size()+1 = 2 elements: 8 bytes of f32.
  auto tiny = make_staged_communicator(make_local_communicator("tiny"), 4);
  float* d = upload(std::vector<float>(3, 1.0f));
  try {
    tiny->reduce_scatter(d, d, 3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("staging buffer of 4 bytes"), std::string::npos)
        << e.what();
  }
  tiny->all_reduce(d, 3);  // one element per chunk fits
  EXPECT_EQ(download(d, 3), std::vector<float>(3, 1.0f));
}

TEST_P(StagedComm, RejectsAZeroStagingBuffer) {
  EXPECT_THROW(make_staged_communicator(make_local_communicator(), 0), Error);
}

}  // namespace
}  // namespace weft::comm::cuda
