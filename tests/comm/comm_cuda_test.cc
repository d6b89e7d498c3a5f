// The communicators on device buffers (comm/cuda) in one process, at size 1: the NCCL
// communicator bootstrapped from the Local one, and the staged communicator over the Local one
// with a staging buffer far smaller than the buffers (1 KiB against 10000 floats), so every
// collective runs in chunks. Each op runs on device buffers and is checked by copying back.
//
// Needs a GPU: every test skips where none is visible, with the message that makes ctest report
// the binary as skipped (tests/comm/CMakeLists.txt). The 2-rank cases are comm_cuda_mpi_test.cc.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

TEST_P(DeviceComm, IsTheGroupOfOneItWasMadeFrom) {
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
  EXPECT_EQ(comm_->name(), "world");
}

TEST_P(DeviceComm, AllReduceOfOneRankLeavesEveryTypeAsItIs) {
  const auto f = ramp<float>(kN);
  float* df = upload(f);
  comm_->all_reduce(df, kN, ReduceOp::Sum);
  EXPECT_EQ(download(df, kN), f);
  comm_->all_reduce(df, kN, ReduceOp::Max);
  EXPECT_EQ(download(df, kN), f);

  const auto d = ramp<double>(kN, 7);
  double* dd = upload(d);
  comm_->all_reduce(dd, kN);
  EXPECT_EQ(download(dd, kN), d);

  const auto i = ramp<int64_t>(kN, 3);
  int64_t* di = upload(i);
  comm_->all_reduce(di, kN, ReduceOp::Max);
  EXPECT_EQ(download(di, kN), i);

  const auto ints = ramp<float>(kN, 5);
  std::vector<BF16> b(ints.size());
  std::transform(ints.begin(), ints.end(), b.begin(), BF16::from_float);
  BF16* db = upload(b);
  comm_->all_reduce(db, kN);
  const auto got = download(db, kN);
  for (int64_t k = 0; k < kN; ++k) ASSERT_EQ(got[k].bits, b[k].bits) << "bf16 " << k;
}

TEST_P(DeviceComm, ReduceScatterOfOneRankCopiesTheInput) {
  const auto in = ramp<float>(kN);
  float* din = upload(in);
  float* dout = upload(std::vector<float>(kN, -1.0f));
  comm_->reduce_scatter(dout, din, kN);
  EXPECT_EQ(download(dout, kN), in);
}

TEST_P(DeviceComm, AllGatherOfOneRankCopiesTheInputAndMayRunInPlace) {
  const auto in = ramp<int32_t>(kN);
  int32_t* din = upload(in);
  int32_t* dout = upload(std::vector<int32_t>(kN, -1));
  comm_->all_gather(dout, din, kN);
  EXPECT_EQ(download(dout, kN), in);
  comm_->all_gather(dout, dout, kN);  // the input is this rank's block of the output
  EXPECT_EQ(download(dout, kN), in);
}

TEST_P(DeviceComm, BroadcastFromTheOnlyRankKeepsTheBuffer) {
  const auto v = ramp<uint8_t>(kN);
  uint8_t* d = upload(v);
  comm_->broadcast(d, kN, 0);
  EXPECT_EQ(download(d, kN), v);
  EXPECT_THROW(comm_->broadcast(d, kN, 1), Error);
}

TEST_P(DeviceComm, BarrierOfOneRankReturns) {
  comm_->barrier();
  comm_->barrier();
}

TEST_P(DeviceComm, SplitMakesAGroupOfOneThatWorks) {
  std::unique_ptr<Communicator> sub = comm_->split(3, 0, "tp");
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->name(), "tp");
  EXPECT_EQ(sub->rank(), 0);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->timeout_seconds(), comm_->timeout_seconds());
  const auto v = ramp<float>(kN);
  float* d = upload(v);
  sub->all_reduce(d, kN);
  sub->barrier();
  EXPECT_EQ(download(d, kN), v);
}

TEST_P(DeviceComm, ZeroLengthOpsComplete) {
  float* d = upload(std::vector<float>{42.0f});
  comm_->all_reduce(d, 0);
  comm_->reduce_scatter(d, d, 0);
  comm_->all_gather(d, d, 0);
  comm_->broadcast(d, 0, 0);
  EXPECT_EQ(download(d, 1), std::vector<float>{42.0f});
}

TEST_P(DeviceComm, AsyncWorkCompletesAndThenTestsComplete) {
  const auto v = ramp<float>(kN);
  float* d = upload(v);
  Work w = comm_->all_reduce_async(d, kN, DataType::F32, ReduceOp::Sum);
  w.wait();
  EXPECT_TRUE(w.test());
  EXPECT_FALSE(w.pending());
  EXPECT_EQ(download(d, kN), v);
}

TEST_P(DeviceComm, SendToTheOnlyRankThrows) {
  float* d = upload(std::vector<float>(4, 1.0f));
  EXPECT_THROW(comm_->send(d, 4, 0), Error);
  EXPECT_THROW(comm_->recv(d, 4, 0), Error);
}

TEST_P(DeviceComm, NegativeCountThrows) {
  float* d = upload(std::vector<float>(4, 1.0f));
  EXPECT_THROW(comm_->all_reduce(d, -1), Error);
}

// ---- NCCL only ----

class NcclComm : public DeviceComm {};
INSTANTIATE_TEST_SUITE_P(Backends, NcclComm, testing::Values(Backend::Nccl), backend_name);

TEST_P(NcclComm, SplitWithANegativeColorJoinsNoGroup) {
  EXPECT_EQ(comm_->split(-1, 0, "none"), nullptr);
}

TEST_P(NcclComm, RefusesToReduceBytes) {
  uint8_t* d = upload(std::vector<uint8_t>(4, 1));
  EXPECT_THROW(comm_->all_reduce(d, 4), Error);
}

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

TEST_P(StagedComm, PassesItsTimeoutToTheHostCommunicator) {
  comm_->set_timeout_seconds(12.5);
  EXPECT_EQ(comm_->split(0, 0, "sub")->timeout_seconds(), 12.5);
}

TEST_P(StagedComm, RejectsAZeroStagingBuffer) {
  EXPECT_THROW(make_staged_communicator(make_local_communicator(), 0), Error);
}

}  // namespace
}  // namespace weft::comm::cuda
