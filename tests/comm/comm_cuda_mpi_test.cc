// The communicators on device buffers across processes (comm/cuda), under the shared MPI test
// main. The staged communicator over MPI with every rank on device 0 (the case: ranks
// sharing one GPU), each op compared with the same op on host buffers through the MPI
// communicator itself; and the NCCL communicator with one GPU per rank, only where there are as
// many GPUs as ranks (NCCL refuses two ranks of one communicator on one device).
//
// Every rank reaches the same verdict on skipping (the device counts are reduced over the world
// first), so no rank waits in a collective that the others skipped. Rank 0 prints the skip
// message, which makes ctest report the test as skipped (tests/comm/CMakeLists.txt).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/mpi_test.h"
#include "weft/comm/cuda/nccl_communicator.h"
#include "weft/comm/cuda/staged_communicator.h"
#include "weft/core/check.h"
#include "weft/core/dtype.h"
#include "weft/kernels/cuda/arena.h"

namespace weft::comm::cuda {
namespace {

constexpr const char* kNoDevice = "weft-cuda-skip: no CUDA device visible";
constexpr size_t kStagingBytes = 1024;  // far below the buffers: every collective is chunked
constexpr int64_t kN = 2501;            // odd, so the last chunk is a short one

// Exact in every type and under sums of a few ranks; different across ranks and indices.
template <typename T>
std::vector<T> values(int rank, int64_t n, int salt = 0) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = static_cast<T>(((rank + 1) * (i + salt)) % 97 - 40);
  }
  return v;
}

// The smallest device count of any rank: the same answer everywhere.
int min_device_count() {
  int32_t n = kernels::cuda::device_count();
  int32_t neg = -n;
  test::test_world().all_reduce(&neg, 1, ReduceOp::Max);
  return -neg;
}

class DeviceOverMpi : public testing::Test {
 protected:
  void SetUp() override {
    if (min_device_count() == 0) GTEST_SKIP() << kNoDevice;
    arena_ = std::make_unique<kernels::cuda::Arena>(size_t{64} << 20);
    // Each test on communicators of its own, so a failure cannot leave the world unmatched.
    host_ = test::test_world().split(0, test::test_world().rank(), "host");
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

  int rank() const { return host_->rank(); }
  int size() const { return host_->size(); }

  // Every collective on `dev` (device buffers) against the same on host_ (host buffers, MPI).
  template <typename T>
  void check_all_reduce(Communicator& dev, ReduceOp op) {
    auto expected = values<T>(rank(), kN);
    T* d = upload(expected);
    dev.all_reduce(d, kN, op);
    host_->all_reduce(expected.data(), kN, op);
    EXPECT_EQ(download(d, kN), expected);
  }
  void check_collectives(Communicator& dev) {
    check_all_reduce<float>(dev, ReduceOp::Sum);
    check_all_reduce<float>(dev, ReduceOp::Max);
    check_all_reduce<double>(dev, ReduceOp::Sum);
    check_all_reduce<int32_t>(dev, ReduceOp::Max);
    check_all_reduce<int64_t>(dev, ReduceOp::Sum);

    {  // bf16 (small integers: sums exact in any order, so the device and host orders agree)
      const auto ints = values<float>(rank(), kN, 3);
      std::vector<BF16> expected(ints.size());
      std::transform(ints.begin(), ints.end(), expected.begin(), BF16::from_float);
      BF16* d = upload(expected);
      dev.all_reduce(d, kN);
      host_->all_reduce(expected.data(), kN);
      const auto got = download(d, kN);
      for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(got[i].bits, expected[i].bits) << "bf16 " << i;
    }

    const int64_t p = size();
    {
      const auto in = values<float>(rank(), p * kN, 1);
      std::vector<float> expected(kN);
      float* din = upload(in);
      float* dout = upload(std::vector<float>(kN, -1.0f));
      dev.reduce_scatter(dout, din, kN);
      host_->reduce_scatter(expected.data(), in.data(), kN);
      EXPECT_EQ(download(dout, kN), expected) << "reduce_scatter";
    }
    {
      const auto in = values<int64_t>(rank(), kN, 2);
      std::vector<int64_t> expected(static_cast<size_t>(p * kN));
      int64_t* din = upload(in);
      int64_t* dout = upload(std::vector<int64_t>(static_cast<size_t>(p * kN), -1));
      dev.all_gather(dout, din, kN);
      host_->all_gather(expected.data(), in.data(), kN);
      EXPECT_EQ(download(dout, p * kN), expected) << "all_gather";
      // In place: the input is this rank's block of the output.
      std::vector<int64_t> mine(static_cast<size_t>(p * kN), -1);
      std::copy(in.begin(), in.end(), mine.begin() + rank() * kN);
      int64_t* dmine = upload(mine);
      dev.all_gather(dmine, dmine + rank() * kN, kN);
      EXPECT_EQ(download(dmine, p * kN), expected) << "all_gather in place";
    }
    for (int root = 0; root < size(); ++root) {
      auto expected = values<uint8_t>(rank(), kN, root);
      uint8_t* d = upload(expected);
      dev.broadcast(d, kN, root);
      host_->broadcast(expected.data(), kN, root);
      EXPECT_EQ(download(d, kN), expected) << "broadcast from " << root;
    }
    {  // zero-length collectives still meet
      float* d = upload(std::vector<float>{5.0f});
      dev.all_reduce(d, 0);
      dev.reduce_scatter(d, d, 0);
      dev.all_gather(d, d, 0);
      dev.broadcast(d, 0, 0);
      EXPECT_EQ(download(d, 1), std::vector<float>{5.0f});
    }
    dev.barrier();
  }

  // A split by rank parity, then an all-reduce on it against the host split.
  void check_split(Communicator& dev) {
    std::unique_ptr<Communicator> sub = dev.split(rank() % 2, rank(), "parity");
    std::unique_ptr<Communicator> host_sub = host_->split(rank() % 2, rank(), "parity");
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->name(), "parity");
    EXPECT_EQ(sub->rank(), host_sub->rank());
    EXPECT_EQ(sub->size(), host_sub->size());
    auto expected = values<float>(rank(), kN, 5);
    float* d = upload(expected);
    sub->all_reduce(d, kN);
    host_sub->all_reduce(expected.data(), kN);
    EXPECT_EQ(download(d, kN), expected);
    sub->barrier();
  }

  std::unique_ptr<kernels::cuda::Arena> arena_;
  std::unique_ptr<Communicator> host_;
};

// ---- staged, every rank on device 0 ----

class StagedOverMpi : public DeviceOverMpi {
 protected:
  void SetUp() override {
    DeviceOverMpi::SetUp();
    if (IsSkipped()) return;
    staged_ = make_staged_communicator(
        test::test_world().split(0, test::test_world().rank(), "staged"), kStagingBytes);
  }
  std::unique_ptr<Communicator> staged_;
};

TEST_F(StagedOverMpi, IsTheGroupOfItsHostCommunicator) {
  EXPECT_EQ(staged_->rank(), test::test_world().rank());
  EXPECT_EQ(staged_->size(), test::test_world().size());
  EXPECT_EQ(staged_->name(), "staged");
}

TEST_F(StagedOverMpi, CollectivesInChunksMatchTheMpiCommunicatorOnHostBuffers) {
  check_collectives(*staged_);
}

TEST_F(StagedOverMpi, SplitGroupsMatchTheMpiCommunicator) { check_split(*staged_); }

// Every rank sends to the next one before receiving from the previous one, with messages above
// MPI's eager limit: this completes only because a staged send is asynchronous (as the pipeline
// runner needs). Two messages per pair, with different tags, arrive in order.
TEST_F(StagedOverMpi, SendsAreEagerAroundARing) {
  if (size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int next = (rank() + 1) % size(), prev = (rank() + size() - 1) % size();
  const int64_t n = 100000;  // 400 KB: a rendezvous message for Open MPI's vader
  const auto a = values<float>(rank(), n, 11), b = values<float>(rank(), n, 12);
  float* da = upload(a);
  float* db = upload(b);
  Work wa = staged_->send_async(da, n, DataType::F32, next, 1);
  Work wb = staged_->send_async(db, n, DataType::F32, next, 2);
  float* ra = upload(std::vector<float>(n, 0.0f));
  float* rb = upload(std::vector<float>(n, 0.0f));
  staged_->recv(ra, n, prev, 1);
  Work w = staged_->recv_async(rb, n, DataType::F32, prev, 2);
  w.wait();
  wa.wait();
  wb.wait();
  EXPECT_EQ(download(ra, n), values<float>(prev, n, 11));
  EXPECT_EQ(download(rb, n), values<float>(prev, n, 12));
}

TEST_F(StagedOverMpi, ZeroLengthMessagesArrive) {
  if (size() < 2) GTEST_SKIP() << "needs 2 ranks";
  float* d = upload(std::vector<float>{3.0f});
  if (rank() == 0) staged_->send(d, 0, 1, 4);
  if (rank() == 1) staged_->recv(d, 0, 0, 4);
  EXPECT_EQ(download(d, 1), std::vector<float>{3.0f});
}

// ---- NCCL, one GPU per rank ----

class NcclOverMpi : public DeviceOverMpi {
 protected:
  void SetUp() override {
    DeviceOverMpi::SetUp();
    if (IsSkipped()) return;
    if (!have_nccl()) GTEST_SKIP() << "built without NCCL";
    const int devices = min_device_count();
    if (devices < size()) {
      // Not the cuda-skip message: where the staged tests ran, the binary passed.
      GTEST_SKIP() << "the NCCL communicator needs one GPU per rank (NCCL refuses two ranks on "
                      "one device): "
                   << devices << " visible for " << size() << " ranks";
    }
    // Rank r on device r, its buffers too.
    arena_.reset();
    ASSERT_EQ(cudaSetDevice(rank()), cudaSuccess);
    arena_ = std::make_unique<kernels::cuda::Arena>(size_t{64} << 20);
    bootstrap_ = test::test_world().split(0, test::test_world().rank(), "bootstrap");
    nccl_ = make_nccl_communicator(*bootstrap_, rank(), "nccl");
  }
  void TearDown() override {
    if (nccl_ == nullptr) return;  // skipped
    nccl_.reset();
    arena_.reset();
    (void)cudaSetDevice(0);  // the next tests' buffers on device 0 again
  }
  std::unique_ptr<Communicator> bootstrap_, nccl_;
};

TEST_F(NcclOverMpi, CollectivesMatchTheMpiCommunicatorOnHostBuffers) {
  EXPECT_EQ(nccl_->rank(), rank());
  EXPECT_EQ(nccl_->size(), size());
  check_collectives(*nccl_);
}

TEST_F(NcclOverMpi, SplitGroupsMatchTheMpiCommunicator) { check_split(*nccl_); }

// NCCL matches messages by order and a send blocks its stream until received, so the pair
// exchanges in an agreed order: even ranks send first.
TEST_F(NcclOverMpi, MessagesPassBetweenPairsInOrder) {
  if (size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int peer = rank() ^ 1;
  if (peer >= size()) return;
  const int64_t n = 100000;
  const auto mine = values<float>(rank(), n, 13);
  float* out = upload(mine);
  float* in = upload(std::vector<float>(n, 0.0f));
  if (rank() % 2 == 0) {
    nccl_->send(out, n, peer);
    nccl_->recv(in, n, peer);
  } else {
    nccl_->recv(in, n, peer);
    nccl_->send(out, n, peer);
  }
  EXPECT_EQ(download(in, n), values<float>(peer, n, 13));
}

}  // namespace
}  // namespace weft::comm::cuda
