// The Recording backend: the communicator contract over thread ranks, each wrapped
// (conformance.h); and every op recorded at call time with the header's element convention, then
// forwarded; split() groups share the recorder.

#include "weft/comm/recording_communicator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/conformance.h"
#include "weft/core/check.h"

namespace weft::comm {
namespace {

using test::Conformance;
INSTANTIATE_TEST_SUITE_P(Recording, Conformance,
                         testing::Values(test::KindFactory{"RecordingOverThreads",
                                                           test::recording_kind}),
                         test::kind_name);

// A group of `size` ranks (this is rank 0) whose ops do nothing: enough to see the convention
// for size > 1 without MPI. It counts what reaches it.
class FakeGroup final : public Communicator {
 public:
  FakeGroup(int size, std::string name) : Communicator(std::move(name), 0, size) {}
  Work all_reduce_async(void*, int64_t, DataType, ReduceOp) override { return forwarded(); }
  Work reduce_scatter_async(void*, const void*, int64_t, DataType) override { return forwarded(); }
  Work all_gather_async(void*, const void*, int64_t, DataType) override { return forwarded(); }
  Work broadcast_async(void*, int64_t, DataType, int) override { return forwarded(); }
  Work send_async(const void*, int64_t, DataType, int, int) override { return forwarded(); }
  Work recv_async(void*, int64_t, DataType, int, int) override { return forwarded(); }
  void barrier() override { ++calls; }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    return std::make_unique<FakeGroup>(color + 1, name);  // the color picks the size
  }
  int calls = 0;

 private:
  Work forwarded() {
    ++calls;
    return Work([] {});
  }
};

struct Recorded {
  std::unique_ptr<RecordingCommunicator> comm;
  FakeGroup* inner;
};

Recorded recording(int size, const std::string& name) {
  auto inner = std::make_unique<FakeGroup>(size, name);
  FakeGroup* raw = inner.get();
  return {
      std::make_unique<RecordingCommunicator>(std::move(inner), std::make_shared<CommRecorder>()),
      raw};
}

TEST(RecordingCommunicator, RecordsEveryOpWithTheElementConvention) {
  auto [c, inner] = recording(4, "tp");
  EXPECT_EQ(c->size(), 4);
  EXPECT_EQ(c->name(), "tp");
  std::vector<float> f(64);
  std::vector<double> d(64);
  std::vector<uint8_t> u(64);
  c->all_reduce(f.data(), 10);
  c->all_gather(d.data(), d.data(), 3);           // output: 4 * 3
  c->reduce_scatter(f.data(), f.data() + 16, 5);  // input: 4 * 5
  c->broadcast(u.data(), 7, 2);
  c->send(f.data(), 6, 1, 9);
  c->recv(d.data(), 2, 3);
  c->barrier();
  EXPECT_EQ(inner->calls, 7);

  const std::vector<CommRecord> r = c->recorder().records();
  ASSERT_EQ(r.size(), 7u);
  const std::vector<CommOp> ops = {CommOp::AllReduce, CommOp::AllGather, CommOp::ReduceScatter,
                                   CommOp::Broadcast, CommOp::Send,      CommOp::Recv,
                                   CommOp::Barrier};
  const std::vector<int64_t> elements = {10, 12, 20, 7, 6, 2, 0};
  const std::vector<int64_t> bytes = {40, 96, 80, 7, 24, 16, 0};
  const std::vector<int> peers = {-1, -1, -1, -1, 1, 3, -1};
  for (size_t i = 0; i < r.size(); ++i) {
    SCOPED_TRACE(comm_op_name(r[i].op));
    EXPECT_EQ(r[i].op, ops[i]);
    EXPECT_EQ(r[i].group, "tp");
    EXPECT_EQ(r[i].group_size, 4);
    EXPECT_EQ(r[i].elements, elements[i]);
    EXPECT_EQ(r[i].bytes, bytes[i]);
    EXPECT_EQ(r[i].peer, peers[i]);
  }
  EXPECT_EQ(r[1].dtype, DataType::F64);
  EXPECT_EQ(r[3].dtype, DataType::U8);
}

// Sequence parallelism replaces one all-reduce of b*s*h elements by an all-gather and a
// reduce-scatter of the same tensor: each records b*s*h.
TEST(RecordingCommunicator, AllGatherPlusReduceScatterRecordWhatOneAllReduceDoes) {
  const int64_t bsh = 2 * 8 * 16;
  auto [c, inner] = recording(4, "tp");
  std::vector<float> full(bsh), shard(bsh / 4);
  c->all_reduce(full.data(), bsh);
  c->all_gather(full.data(), shard.data(), bsh / 4);
  c->reduce_scatter(shard.data(), full.data(), bsh / 4);
  const auto r = c->recorder().records();
  ASSERT_EQ(r.size(), 3u);
  for (const CommRecord& rec : r) EXPECT_EQ(rec.elements, bsh) << comm_op_name(rec.op);
}

TEST(RecordingCommunicator, AsyncOpsAreRecordedWhenCalledNotWhenWaited) {
  auto [c, inner] = recording(2, "dp");
  float x = 0.0f;
  Work w = c->all_reduce_async(&x, 1, DataType::F32, ReduceOp::Max);
  EXPECT_EQ(c->recorder().count(CommOp::AllReduce), 1);
  w.wait();
  EXPECT_EQ(c->recorder().count(CommOp::AllReduce), 1);
}

TEST(RecordingCommunicator, SplitGroupsShareTheRecorderUnderTheirOwnNames) {
  auto [c, inner] = recording(4, "world");
  std::unique_ptr<Communicator> tp = c->split(1, 0, "tp");  // FakeGroup: size color + 1 = 2
  std::unique_ptr<Communicator> dp = c->split(1, 0, "dp");
  EXPECT_EQ(tp->name(), "tp");
  EXPECT_EQ(tp->size(), 2);
  std::vector<float> v(100);
  c->all_reduce(v.data(), 100);
  tp->all_reduce(v.data(), 10);
  tp->all_reduce(v.data(), 20);
  dp->all_gather(v.data(), v.data(), 5);

  const CommRecorder& rec = c->recorder();
  EXPECT_EQ(rec.records().size(), 4u);
  EXPECT_EQ(rec.count(CommOp::AllReduce), 3);
  EXPECT_EQ(rec.bytes(CommOp::AllReduce), (100 + 10 + 20) * 4);
  EXPECT_EQ(rec.bytes(CommOp::AllReduce, "tp"), (10 + 20) * 4);
  EXPECT_EQ(rec.count(CommOp::AllReduce, "tp"), 2);
  EXPECT_EQ(rec.bytes(CommOp::AllReduce, "world"), 400);
  EXPECT_EQ(rec.bytes(CommOp::AllGather, "dp"), 2 * 5 * 4);
  EXPECT_EQ(rec.count(CommOp::AllGather, "tp"), 0);
  EXPECT_EQ(rec.records()[1].group_size, 2);

  c->shared_recorder()->clear();
  EXPECT_TRUE(rec.records().empty());
  EXPECT_EQ(rec.bytes(CommOp::AllReduce), 0);
}

TEST(RecordingCommunicator, RecordsAtCallTimeEvenWhenTheInnerOpFails) {
  auto rec = std::make_shared<CommRecorder>();
  RecordingCommunicator c(make_local_communicator("pp"), rec);
  float x = 0.0f;
  EXPECT_THROW(c.send(&x, 1, 0), Error);  // a group of one has no peer
  ASSERT_EQ(rec->records().size(), 1u);
  EXPECT_EQ(rec->records()[0].op, CommOp::Send);
  EXPECT_EQ(rec->records()[0].group, "pp");
  EXPECT_EQ(rec->records()[0].peer, 0);
}

TEST(RecordingCommunicator, TakesTheInnerTimeoutAndSharesItsRecorder) {
  auto rec = std::make_shared<CommRecorder>();
  auto local = make_local_communicator("world");
  local->set_timeout_seconds(12.0);
  RecordingCommunicator c(std::move(local), rec);
  EXPECT_EQ(c.timeout_seconds(), 12.0);
  EXPECT_EQ(c.shared_recorder(), rec);
  EXPECT_EQ(comm_op_name(CommOp::ReduceScatter), "reduce_scatter");
}

}  // namespace
}  // namespace weft::comm
