// The ordering checker (support/ordering_checker.h) over thread communicators: correct use (every
// op, the in-place forms, several ops in flight, a receive posted before the matching send on both
// ranks, finished by wait() or by order()) gives the wrapped communicator's results; the output
// reads as poison (NaN, -1) until the Work is finished; writing a pending op's input or output,
// and dropping an unfinished Work, fail with the op and group named, on the checker and on its
// splits.

#include "support/ordering_checker.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "comm/conformance.h"
#include "support/thread_ranks.h"
#include "weft/core/check.h"

namespace weft::comm {
namespace {

// Runs fn(checker) on `world` thread ranks. Each checker wraps a split of its rank's thread world
// named "tp" (the checker owns what it wraps), with a short timeout so a bug fails, not hangs.
void run_checked(int world, const std::string& what, const std::function<void(Communicator&)>& fn) {
  weft::test::run_thread_ranks<int>(world, what, [&](Communicator& w) {
    auto inner = w.split(0, w.rank(), "tp");
    inner->set_timeout_seconds(10);
    const auto checker = make_ordering_checker(std::move(inner));
    fn(*checker);
    return 0;
  });
}

// The communicator contract through the checker: every op's data goes through its private copies
// and the poisoned output, and a finished run has no violation. A Work dropped unfinished is
// one by design, so the contract's test of dropped receives is not run here.
test::Kind checked_thread_kind() {
  test::Kind k = test::wrapped_thread_kind(
      [](std::unique_ptr<Communicator> c) { return make_ordering_checker(std::move(c)); });
  const auto run = k.run;
  k.run = [run](int size, const std::string& name, const test::Body& body) {
    run(size, name, [&](Communicator& c, test::Memory& m) {
      body(c, m);
      check_ordering(c);
    });
  };
  k.cancels_receives = false;
  return k;
}

using test::Conformance;
INSTANTIATE_TEST_SUITE_P(OrderingChecker, Conformance,
                         testing::Values(test::KindFactory{"OrderingCheckerOverThreads",
                                                           checked_thread_kind}),
                         test::kind_name);

// fn() must throw weft::Error with every one of `parts` in its message.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (std::string_view part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
    return;
  }
  ADD_FAILURE() << "no weft::Error; expected one saying '" << *parts.begin() << "'";
}

enum class Finish { Wait, Order };
void finish(Work& work, Finish how) { how == Finish::Wait ? work.wait() : work.order(); }

// 1 + 2 + ... + size: the sum of every rank's r + 1.
float rank_sum(const Communicator& c) { return static_cast<float>(c.size() * (c.size() + 1) / 2); }

class OrderingCheckerFinish : public testing::TestWithParam<Finish> {};
INSTANTIATE_TEST_SUITE_P(WaitOrOrder, OrderingCheckerFinish,
                         testing::Values(Finish::Wait, Finish::Order), [](const auto& info) {
                           return info.param == Finish::Wait ? "Wait" : "Order";
                         });

TEST_P(OrderingCheckerFinish, CollectivesGiveTheWrappedResultsAlsoInPlaceAndSeveralInFlight) {
  const Finish how = GetParam();
  for (int size : {1, 2, 3}) {
    run_checked(size, "collectives", [how](Communicator& c) {
      EXPECT_EQ(c.name(), "tp");
      EXPECT_EQ(c.timeout_seconds(), 10);
      const int64_t n = 5;
      const int r = c.rank();
      const float sum = rank_sum(c);
      // Rank r contributes (r + 1) * (j + 1) at element j of every input.
      const auto input = [&](int64_t count) {
        std::vector<float> v(count);
        for (int64_t j = 0; j < count; ++j) v[j] = static_cast<float>((r + 1) * (j + 1));
        return v;
      };

      // Four ops in flight at once, finished in the reverse order: each has its own copies.
      std::vector<float> reduced = input(n);
      std::vector<float> scatter_in = input(n * c.size()), scattered(n);
      std::vector<float> gathered(n * c.size());
      const std::vector<float> mine = input(n);
      std::vector<float> cast(n, static_cast<float>(r));
      const int root = c.size() - 1;
      std::vector<Work> works;
      works.push_back(c.all_reduce_async(reduced.data(), n, DataType::F32, ReduceOp::Sum));
      works.push_back(
          c.reduce_scatter_async(scattered.data(), scatter_in.data(), n, DataType::F32));
      works.push_back(c.all_gather_async(gathered.data(), mine.data(), n, DataType::F32));
      works.push_back(c.broadcast_async(cast.data(), n, DataType::F32, root));
      for (auto w = works.rbegin(); w != works.rend(); ++w) finish(*w, how);
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(reduced[j], sum * (j + 1)) << "all_reduce, element " << j;
        EXPECT_EQ(scattered[j], sum * (r * n + j + 1)) << "reduce_scatter, element " << j;
        EXPECT_EQ(cast[j], static_cast<float>(root)) << "broadcast, element " << j;
        for (int q = 0; q < c.size(); ++q) {
          EXPECT_EQ(gathered[q * n + j], static_cast<float>((q + 1) * (j + 1))) << "all_gather";
        }
      }
      EXPECT_EQ(scatter_in, input(n * c.size())) << "reduce_scatter's input is the caller's";

      // In place: reduce_scatter's result at the front of its input (MPI) or in this rank's block
      // (NCCL), all_gather's input in this rank's block of the output.
      std::vector<float> mpi = input(n * c.size()), nccl = input(n * c.size());
      std::vector<float> in_place(n * c.size(), -7);
      std::copy(mine.begin(), mine.end(), in_place.begin() + r * n);
      Work a = c.reduce_scatter_async(mpi.data(), mpi.data(), n, DataType::F32);
      Work b = c.reduce_scatter_async(nccl.data() + r * n, nccl.data(), n, DataType::F32);
      Work g = c.all_gather_async(in_place.data(), in_place.data() + r * n, n, DataType::F32);
      finish(a, how);
      finish(b, how);
      finish(g, how);
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(mpi[j], scattered[j]) << "reduce_scatter into its input's front, element " << j;
        EXPECT_EQ(nccl[r * n + j], scattered[j]) << "reduce_scatter into its block, element " << j;
      }
      EXPECT_EQ(in_place, gathered) << "all_gather in place";
      c.barrier();
      check_ordering(c);
    });
  }
}

TEST_P(OrderingCheckerFinish, ARecvPostedBeforeTheSendOnEveryRankGetsTheMessage) {
  const Finish how = GetParam();
  for (int size : {2, 3}) {
    // A ring (on 2 ranks, an exchange): every rank posts its receive before its send, as the
    // pipeline runner does, so the checker must not wait for the receive inside recv_async.
    run_checked(size, "ring", [how](Communicator& c) {
      const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
      std::vector<int64_t> got(3, 0), sent = {c.rank(), 10 * c.rank(), 100 * c.rank()};
      Work recv = c.recv_async(got.data(), 3, DataType::I64, prev, 4);
      Work send = c.send_async(sent.data(), 3, DataType::I64, next, 4);
      finish(send, how);
      finish(recv, how);
      EXPECT_EQ(got, (std::vector<int64_t>{prev, 10 * prev, 100 * prev}));
      check_ordering(c);
    });
  }
}

TEST(OrderingChecker, TestForwardsToTheWrappedWork) {
  run_checked(2, "test()", [](Communicator& c) {
    double x = 3;
    if (c.rank() == 1) {
      Work recv = c.recv_async(&x, 1, DataType::F64, 0, 0);
      EXPECT_FALSE(recv.test()) << "rank 0 sends only after the barrier";
      c.barrier();
      while (!recv.test()) {
      }
      EXPECT_TRUE(std::isnan(x)) << "test() says complete, but only wait() delivers the result";
      recv.wait();
      EXPECT_EQ(x, 3.0);
    } else {
      c.barrier();
      c.send(&x, 1, 1);
    }
  });
}

TEST(OrderingChecker, TheOutputIsPoisonUntilTheWorkIsFinished) {
  run_checked(2, "poison", [](Communicator& c) {
    std::vector<float> f(4, 1.0f);
    std::vector<double> d(4, 2.0);
    std::vector<int32_t> i(4, 3);
    Work wf = c.all_reduce_async(f.data(), 4, DataType::F32, ReduceOp::Sum);
    Work wd = c.all_reduce_async(d.data(), 4, DataType::F64, ReduceOp::Sum);
    Work wi = c.all_reduce_async(i.data(), 4, DataType::I32, ReduceOp::Sum);
    // A kernel reading the sums now computes with NaN (the thread communicator has in fact
    // finished the sums already: only the checker stands between them and this read).
    for (int k = 0; k < 4; ++k) {
      EXPECT_TRUE(std::isnan(f[k]) && std::isnan(d[k])) << f[k] << " " << d[k];
      EXPECT_EQ(i[k], -1);
    }
    wf.wait();
    wd.order();
    wi.wait();
    EXPECT_EQ(f, std::vector<float>(4, 2.0f));
    EXPECT_EQ(d, std::vector<double>(4, 4.0));
    EXPECT_EQ(i, std::vector<int32_t>(4, 6));

    // A receive's buffer, even once the message has arrived.
    std::vector<float> got(2, 0.0f);
    const std::vector<float> msg = {5, 6};
    Work recv = c.recv_async(got.data(), 2, DataType::F32, 1 - c.rank(), 0);
    c.send(msg.data(), 2, 1 - c.rank());
    c.barrier();  // the peer's message is in
    EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]));
    recv.order();
    EXPECT_EQ(got, msg);
  });
}

// What a write to a pending op's `buffer` ("input" or "output") makes its wait throw: the op, the
// group and the rank. One violation per run: once one is recorded, every later op throws.
std::vector<std::string> written(const std::string& op, const Communicator& c,
                                 const std::string& buffer) {
  return {op + " on group 'tp' (rank " + std::to_string(c.rank()) + " of " +
              std::to_string(c.size()) + ")",
          "its " + buffer + " was written before the Work was waited or ordered"};
}
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  ASSERT_EQ(parts.size(), 2u);
  expect_error(fn, {parts[0], parts[1]});
}

TEST(OrderingChecker, WritingAPendingAllReducesBufferThrows) {
  run_checked(2, "all_reduce", [](Communicator& c) {
    std::vector<float> v(3, 1.0f);
    Work reduce = c.all_reduce_async(v.data(), 3, DataType::F32, ReduceOp::Sum);
    if (c.rank() == 1) {
      reduce.wait();  // the peer's mistake is the peer's
      EXPECT_EQ(v, std::vector<float>(3, 2.0f));
      return;
    }
    v[1] = 0.5f;  // a kernel updating the gradients before their sum is in (in place: the output)
    expect_error([&] { reduce.wait(); }, written("all_reduce", c, "output"));
    expect_error([&] { check_ordering(c); }, written("all_reduce", c, "output"));
  });
}

TEST(OrderingChecker, WritingTheInputBlocksOfAnInPlaceReduceScatterThrows) {
  run_checked(2, "reduce_scatter", [](Communicator& c) {
    // The MPI form: the result goes to the input's front; the blocks after it are input only.
    std::vector<float> blocks(4, 1.0f);
    Work scatter = c.reduce_scatter_async(blocks.data(), blocks.data(), 2, DataType::F32);
    blocks[3] = 0;
    expect_error([&] { scatter.order(); }, written("reduce_scatter", c, "input"));
  });
}

TEST(OrderingChecker, WritingAPendingSendsBufferThrowsAndTheReceiverGetsTheValuesOfTheCall) {
  run_checked(2, "send", [](Communicator& c) {
    std::vector<int32_t> act = {7, 8};
    if (c.rank() == 0) {
      Work send = c.send_async(act.data(), 2, DataType::I32, 1, 0);
      act[0] = 70;  // the next microbatch's activations, before the send is finished
      expect_error([&] { send.wait(); }, written("send", c, "input"));
    } else {
      std::vector<int32_t> got(2);
      c.recv(got.data(), 2, 0);
      EXPECT_EQ(got, act);
    }
  });
}

TEST(OrderingChecker, WritingAPendingRecvsBufferThrows) {
  run_checked(2, "recv", [](Communicator& c) {
    std::vector<int32_t> buf = {7, 8};
    if (c.rank() == 0) {
      c.send(buf.data(), 2, 1);
    } else {
      Work recv = c.recv_async(buf.data(), 2, DataType::I32, 0, 0);
      buf[1] = 0;  // a kernel writing into the receive buffer before the message is in
      expect_error([&] { recv.order(); }, written("recv", c, "output"));
    }
  });
}

TEST(OrderingChecker, ADroppedWorkFailsTheNextOpBarrierWaitAndCheck) {
  run_checked(2, "drops", [](Communicator& c) {
    const std::string dropped = "all_reduce on group 'tp' (rank " + std::to_string(c.rank()) +
                                " of 2) was dropped before wait() or order()";
    float x = 1;
    Work earlier = c.broadcast_async(&x, 1, DataType::F32, 0);
    // Complete at once on the thread communicator, and polled: still a Work the runtime must
    // finish, or on a GPU nothing orders the compute stream after it.
    Work done = c.all_reduce_async(&x, 1, DataType::F32, ReduceOp::Sum);
    EXPECT_TRUE(done.test());
    done = Work();  // dropped
    // Every rank dropped it, so every rank throws here, before entering the wrapped op.
    expect_error([&] { c.all_reduce(&x, 1); }, {dropped});
    expect_error([&] { c.barrier(); }, {dropped});
    expect_error([&] { earlier.wait(); }, {dropped});
    expect_error([&] { check_ordering(c); }, {dropped});
  });
}

TEST(OrderingChecker, ManyDropsAreCountedAndTheFirstFewNamed) {
  run_checked(1, "many drops", [](Communicator& c) {
    float x = 0;
    std::vector<Work> sends;
    for (int k = 0; k < 20; ++k) sends.push_back(c.send_async(&x, 1, DataType::F32, 0, k));
    sends.clear();  // all dropped (the next op would throw after the first drop)
    expect_error(
        [&] { check_ordering(c); },
        {"20 ordering violations: send on group 'tp' (rank 0 of 1) was dropped", "; and 12 more"});
  });
}

TEST(OrderingChecker, WorksDroppedByAnExceptionAndFinishedCopiesAreNoViolation) {
  run_checked(2, "no violation", [](Communicator& c) {
    float x = 1;
    try {
      Work w = c.all_reduce_async(&x, 1, DataType::F32, ReduceOp::Sum);
      throw std::runtime_error("a kernel failed");  // unwinding cannot finish w
    } catch (const std::runtime_error&) {
    }
    x = 1;  // the unfinished all_reduce left its poison
    // A wrapper (the recording communicator) keeps a copy of the Work it wraps.
    Work w = c.all_reduce_async(&x, 1, DataType::F32, ReduceOp::Sum);
    Work copy = w;
    w.wait();
    copy.wait();  // already finished: nothing to do, and the output is not checked again
    EXPECT_EQ(x, 2.0f);
    check_ordering(c);
  });
}

TEST(OrderingChecker, SplitGroupsShareTheFailureState) {
  run_checked(4, "splits", [](Communicator& c) {
    auto dp = c.split(c.rank() % 2, c.rank(), "dp");
    float x = static_cast<float>(c.rank());
    dp->all_reduce(&x, 1);  // correct use on the split
    EXPECT_EQ(x, c.rank() % 2 == 0 ? 2.0f : 4.0f);
    check_ordering(c);
    check_ordering(*dp);
    dp->all_gather_async(&x, &x, 0, DataType::F32);  // dropped on the split, on every rank
    const std::string dropped = "all_gather on group 'dp' (rank " + std::to_string(c.rank() / 2) +
                                " of 2) was dropped before wait() or order()";
    expect_error([&] { c.all_reduce(&x, 1); }, {dropped});  // found by the original
    expect_error([&] { check_ordering(c); }, {dropped});
    expect_error([&] { dp->split(0, 0, "again"); }, {dropped});
  });
}

TEST(OrderingChecker, CheckOrderingNeedsAChecker) {
  auto local = make_local_communicator("solo");
  expect_error([&] { check_ordering(*local); }, {"group 'solo' is not an ordering checker"});
}

}  // namespace
}  // namespace weft::comm
