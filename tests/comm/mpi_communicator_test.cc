// The MPI backend on 1, 2 and 4 ranks (weft_add_mpi_test): the communicator contract
// (conformance.h) on the world and, on 4 ranks, also on groups of 3 (whose ring blocks split no
// count evenly; rank 3 is a group of 1) and of 2; and what is MPI's own: the launch, nonblocking
// Work, Recording over MPI, and the all-reduce's speed against MPI_Allreduce.

#include "weft/comm/mpi_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/conformance.h"
#include "support/mpi_test.h"
#include "weft/comm/recording_communicator.h"
#include "weft/core/check.h"
#include "weft/core/dtype.h"

namespace weft::comm {
namespace {

using weft::test::test_world;

test::Kind mpi_kind() {
  test::Kind k;
  const int world = test_world().size();
  k.sizes = {world};
  if (world == 4) k.sizes = {4, 3, 2};
  // Each run on a communicator of its own, so a failure cannot leave the world unmatched.
  k.run = [](int size, const std::string& name, const test::Body& body) {
    Communicator& w = test_world();
    auto group = w.split(w.rank() / size, w.rank(), name);
    test::HostMemory memory;
    body(*group, memory);
  };
  k.messages_to_self = true;
  k.truncation_says = " failed: MPI_ERR_TRUNCATE";
  k.cancels_receives = true;
  return k;
}

using test::Conformance;
INSTANTIATE_TEST_SUITE_P(Mpi, Conformance, testing::Values(test::KindFactory{"Mpi", mpi_kind}),
                         test::kind_name);

TEST(Session, KnowsItWasLaunchedByMpirun) { EXPECT_TRUE(launched_by_mpi()); }

// Nonblocking: each kind of operation returns a pending Work (the contract's test of operations
// in flight together, conformance.cc, checks what they deliver).
TEST(Async, EveryOperationIsPendingUntilWaited) {
  Communicator& w = test_world();
  auto pairs = w.split(w.rank() / 2, w.rank(), "pairs");
  const int next = (w.rank() + 1) % w.size(), prev = (w.rank() + w.size() - 1) % w.size();
  std::vector<float> big(1 << 16, 1.0f);
  std::vector<double> gathered(3 * w.size()), mine(3, 0.5);
  std::vector<int64_t> pair_sum(4, 1);
  std::vector<int32_t> ring_out(8, w.rank()), ring_in(8, -1);
  std::vector<Work> works;
  works.push_back(
      w.all_reduce_async(big.data(), int64_t(big.size()), DataType::F32, ReduceOp::Sum));
  works.push_back(w.recv_async(ring_in.data(), 8, DataType::I32, prev, 3));
  works.push_back(pairs->all_reduce_async(pair_sum.data(), 4, DataType::I64, ReduceOp::Sum));
  works.push_back(w.all_gather_async(gathered.data(), mine.data(), 3, DataType::F64));
  works.push_back(w.send_async(ring_out.data(), 8, DataType::I32, next, 3));
  for (Work& work : works) EXPECT_TRUE(work.pending());
  for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
  EXPECT_EQ(big[0], static_cast<float>(w.size()));
  EXPECT_EQ(ring_in[0], prev);
}

TEST(Recording, OverMpiRecordsTheBytesOfEachOpAndItsGroup) {
  Communicator& w = test_world();
  auto rec = std::make_shared<CommRecorder>();
  RecordingCommunicator c(w.split(0, w.rank(), "world"), rec);
  const int n = c.size(), next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;

  std::vector<float> grads(1000, 1.0f);
  c.all_reduce(grads.data(), 1000);
  EXPECT_EQ(grads[0], static_cast<float>(n));  // forwarded, not just recorded
  std::vector<double> shard(10, 1.0), full(10 * n);
  c.all_gather(full.data(), shard.data(), 10);
  c.reduce_scatter(shard.data(), full.data(), 10);
  EXPECT_EQ(shard[0], static_cast<double>(n));
  std::vector<uint8_t> bytes(33, 1);
  c.broadcast(bytes.data(), 33, 0);
  std::vector<int32_t> act(6, c.rank()), got(6, -1);
  Work r = c.recv_async(got.data(), 6, DataType::I32, prev, 0);
  c.send(act.data(), 6, next, 0);
  r.wait();
  EXPECT_EQ(got[0], prev);
  auto tp = c.split(c.rank() / 2, c.rank(), "tp");
  std::vector<float> x(8, 1.0f);
  tp->all_reduce(x.data(), 8);

  EXPECT_EQ(rec->bytes(CommOp::AllReduce, "world"), 4000);
  EXPECT_EQ(rec->bytes(CommOp::AllGather, "world"), 8 * 10 * n);
  EXPECT_EQ(rec->bytes(CommOp::ReduceScatter, "world"), 8 * 10 * n);
  EXPECT_EQ(rec->bytes(CommOp::Broadcast), 33);
  EXPECT_EQ(rec->bytes(CommOp::Send), 24);
  EXPECT_EQ(rec->bytes(CommOp::Recv), 24);
  EXPECT_EQ(rec->bytes(CommOp::AllReduce, "tp"), 32);
  EXPECT_EQ(rec->count(CommOp::AllReduce), 2);
  const auto records = rec->records();
  ASSERT_EQ(records.size(), 7u);
  EXPECT_EQ(records[4].op, CommOp::Recv);
  EXPECT_EQ(records[4].peer, prev);
  EXPECT_EQ(records[5].op, CommOp::Send);
  EXPECT_EQ(records[5].peer, next);
  EXPECT_EQ(records[6].group, "tp");
  EXPECT_EQ(records[6].group_size, tp->size());
}

// The slowest rank's median time of op() over 23 runs, in ms.
template <typename Op>
double median_ms(Communicator& w, Op&& op) {
  std::vector<double> ms;
  for (int rep = 0; rep < 23; ++rep) {
    w.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    op();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  double m = ms[ms.size() / 2];
  w.all_reduce(&m, 1, ReduceOp::Max);
  return m;
}

// DESIGN.md §6 asks that the polling wait is not pathologically slower than MPI's own blocking
// all-reduce; both are measured (1M floats) and printed.
TEST(Performance, AllReduceOfOneMillionFloatsIsNotPathologicallySlow) {
  Communicator& w = test_world();
  const int64_t n = int64_t{1} << 20;
  std::vector<float> v(n), f(n);
  const double ours = median_ms(w, [&] { w.all_reduce(v.data(), n); });
  const double mpi = median_ms(w, [&] {
    MPI_Allreduce(MPI_IN_PLACE, f.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  });
  if (w.rank() == 0) {
    std::printf(
        "[----------] all_reduce of 1M f32 on %d ranks: median %.2f ms (MPI_Allreduce: %.2f ms)\n",
        w.size(), ours, mpi);
  }
  EXPECT_LT(ours, 5 * mpi + 20.0) << "Communicator " << ours << " ms, MPI_Allreduce " << mpi
                                  << " ms";
}

}  // namespace
}  // namespace weft::comm
