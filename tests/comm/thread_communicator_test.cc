// The thread backend: the communicator contract over ranks as threads (conformance.h), and what
// is the thread backend's own: collectives complete at once, bf16 sums fold in rank order, eager
// sends, barriers as a memory fence, timeouts that leave the group unusable, mismatched
// collectives, the errors every rank gets, and the process groups of parallel::make_groups over
// a thread world.

#include "support/thread_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/conformance.h"
#include "weft/core/check.h"
#include "weft/core/dtype.h"
#include "weft/parallel/groups.h"
#include "weft/parallel/topology.h"

namespace weft::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Runs fn(rank's communicator) on one thread per rank and joins them all, also when some throw;
// returns each rank's exception message ("" when it returned). A bug that would hang fails after
// `timeout_s` instead.
std::vector<std::string> run_ranks(int n, const std::function<void(Communicator&)>& fn,
                                   double timeout_s = 10) {
  auto comms = make_thread_communicators(n);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    comms[r]->set_timeout_seconds(timeout_s);
    threads.emplace_back([&, r] {
      try {
        fn(*comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty message)";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// As run_ranks, and every rank must return normally.
void run_ok(int n, const std::function<void(Communicator&)>& fn) {
  const auto errors = run_ranks(n, fn);
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " of " << n;
}

constexpr int kSizes[] = {1, 2, 3, 4};

using test::Conformance;
INSTANTIATE_TEST_SUITE_P(Thread, Conformance,
                         testing::Values(test::KindFactory{"Thread", test::thread_kind}),
                         test::kind_name);

TEST(ThreadCommunicator, AsyncCollectivesReturnCompletedWork) {
  run_ok(2, [](Communicator& w) {
    double v = w.rank() + 1;
    Work work = w.all_reduce_async(&v, 1, DataType::F64, ReduceOp::Sum);
    EXPECT_TRUE(work.test());
    work.wait();
    EXPECT_EQ(v, 3.0);
  });
}

// bf16 (comm/communicator.h): each add in fp32, rounded to bf16, in rank order.
BF16 bf16(float f) { return BF16::from_float(f); }

TEST(ThreadBf16, AllReduceAddsInRankOrder) {
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7 that rounds to the even 1, twice; adding the two
  // 2^-8 first would give 1 + 2^-7 exactly.
  run_ok(3, [](Communicator& w) {
    BF16 v = bf16(w.rank() == 0 ? 1.0f : 0.00390625f);
    w.all_reduce(&v, 1);
    EXPECT_EQ(v.to_float(), 1.0f);
  });
}

TEST(ThreadCommunicator, BarrierMakesEveryRanksEarlierWritesVisible) {
  std::vector<int> written(4, 0);
  run_ok(4, [&](Communicator& w) {
    for (int round = 1; round <= 20; ++round) {
      written[w.rank()] = round;
      w.barrier();
      for (int q = 0; q < w.size(); ++q) ASSERT_EQ(written[q], round) << "rank " << q;
      w.barrier();  // nobody writes the next round before everyone has read this one
    }
  });
}

TEST(ThreadCommunicator, SendsAreEagerSoARingOfSendsBeforeReceivesDoesNotDeadlock) {
  for (int size : kSizes) {
    run_ok(size, [](Communicator& w) {
      const int next = (w.rank() + 1) % w.size(), prev = (w.rank() + w.size() - 1) % w.size();
      std::vector<float> out(1000, static_cast<float>(w.rank())), in(1000, -1.f);
      w.send(out.data(), 1000, next, 3);
      out.assign(out.size(), 99.f);  // the send copied: changing the buffer now changes nothing
      w.recv(in.data(), 1000, prev, 3);
      EXPECT_EQ(in, std::vector<float>(1000, static_cast<float>(prev)));
    });
  }
}

TEST(ThreadCommunicator, ARankSkippingABarrierMakesItsPeerTimeOutAndTheGroupUnusable) {
  std::atomic<bool> timed_out{false};
  double took = 0;
  const auto errors = run_ranks(2, [&](Communicator& w) {
    w.set_timeout_seconds(0.5);
    if (w.rank() == 0) {
      const auto start = Clock::now();
      try {
        w.barrier();
      } catch (const Error&) {
        took = std::chrono::duration<double>(Clock::now() - start).count();
        timed_out = true;
        throw;
      }
    } else {
      while (!timed_out) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      float v = 1;
      w.all_reduce(&v, 1);  // too late: the group is unusable, and says why at once
    }
  });
  EXPECT_EQ(errors[0], "barrier on group 'world' (rank 0 of 2) timed out after 0.5 s");
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 1.5);
  EXPECT_EQ(errors[1],
            "all_reduce on group 'world' (rank 1 of 2): the group is unusable: rank 0 timed out "
            "in barrier");
}

TEST(ThreadCommunicator, ATimedOutCollectiveNamesOpCountAndType) {
  const auto errors = run_ranks(3, [](Communicator& w) {
    w.set_timeout_seconds(0.2);
    if (w.rank() == 2) return;
    std::vector<float> v(4);
    w.all_reduce(v.data(), 4);
  });
  // Whichever waiting rank gives up first times out; the other then finds the group unusable.
  int timeouts = 0;
  for (int r = 0; r < 2; ++r) {
    const std::string want = "all_reduce on group 'world' (rank " + std::to_string(r) +
                             " of 3) timed out after 0.2 s (4 f32)";
    if (errors[r] == want) {
      ++timeouts;
    } else {
      EXPECT_NE(errors[r].find("the group is unusable: rank"), std::string::npos) << errors[r];
    }
  }
  EXPECT_EQ(timeouts, 1);
  EXPECT_EQ(errors[2], "");
}

TEST(ThreadCommunicator, MismatchedCollectivesAreAnErrorOnEveryRankAndTheGroupGoesOn) {
  const auto errors = run_ranks(2, [](Communicator& w) {
    std::vector<float> v(5, 1.f);
    try {
      w.all_reduce(v.data(), w.rank() == 0 ? 4 : 5);
    } catch (const Error&) {
      w.barrier();  // every rank used its turn: the next collective still matches up
      throw;
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("the ranks called different collectives: rank 0 all_reduce(4 f32, "
                             "sum), rank 1 all_reduce(5 f32, sum)"),
              std::string::npos)
        << errors[r];
  }
  const auto kinds = run_ranks(2, [](Communicator& w) {
    float v = 0;
    if (w.rank() == 0) w.broadcast(&v, 1, 0);
    if (w.rank() == 1) w.barrier();
  });
  for (const auto& e : kinds) {
    EXPECT_NE(e.find("rank 0 broadcast(1 f32, root 0), rank 1 barrier"), std::string::npos) << e;
  }
}

TEST(ThreadCommunicator, BadRootsAndColorsAreErrorsOnEveryRank) {
  const auto roots = run_ranks(2, [](Communicator& w) {
    float v = 0;
    w.broadcast(&v, 1, 2);
  });
  for (const auto& e : roots) EXPECT_NE(e.find("root 2 is not a rank"), std::string::npos) << e;
  const auto colors = run_ranks(2, [](Communicator& w) { w.split(w.rank() - 1, 0, "x"); });
  for (const auto& e : colors) {
    EXPECT_NE(e.find("color -1 of rank 0 must be >= 0"), std::string::npos) << e;
  }
}

// parallel::make_groups over a thread world of 4: each group's size and rank follow the topology,
// and an all-reduce over each group sums exactly the world ranks the topology puts in it.
void check_groups(parallel::GridShape shape) {
  const parallel::Topology topo(shape);
  run_ok(4, [&](Communicator& w) {
    const int r = w.rank();
    const parallel::Coord c = topo.coord(r);
    auto g = parallel::make_groups(w, topo);
    auto members_sum = [&](Communicator& group) {
      int64_t v = r;
      group.all_reduce(&v, 1);
      return v;
    };
    auto sum_of = [](const std::vector<int>& ranks) {
      int64_t s = 0;
      for (int q : ranks) s += q;
      return s;
    };
    ASSERT_TRUE(g.tp && g.pp && g.dp && g.model);
    EXPECT_EQ(g.tp->size(), shape.tp);
    EXPECT_EQ(g.tp->rank(), c.tp);
    EXPECT_EQ(g.pp->size(), shape.pp);
    EXPECT_EQ(g.pp->rank(), c.pp);
    EXPECT_EQ(g.dp->size(), shape.dp);
    EXPECT_EQ(g.dp->rank(), c.dp);
    EXPECT_EQ(g.model->size(), shape.tp * shape.pp);
    EXPECT_EQ(g.model->rank(), c.tp + shape.tp * c.pp);
    EXPECT_EQ(members_sum(*g.tp), sum_of(topo.tp_group(r)));
    EXPECT_EQ(members_sum(*g.pp), sum_of(topo.pp_group(r)));
    EXPECT_EQ(members_sum(*g.dp), sum_of(topo.dp_group(r)));
    if (shape.pp > 1) {
      ASSERT_TRUE(g.embedding);
      EXPECT_EQ(g.embedding->size(), 2);
      EXPECT_EQ(g.embedding->rank(), c.pp == 0 ? 0 : 1);
      EXPECT_EQ(members_sum(*g.embedding), sum_of(topo.pp_group(r)));
    } else {
      EXPECT_FALSE(g.embedding);
    }
  });
}

TEST(ThreadCommunicator, MakeGroupsWorksOverAThreadWorldOfTp2Pp2) {
  check_groups({.tp = 2, .pp = 2});
}

TEST(ThreadCommunicator, MakeGroupsWorksOverAThreadWorldOfTp2Dp2) {
  check_groups({.tp = 2, .dp = 2});
}

TEST(ThreadCommunicator, ASizeOfZeroIsRejected) {
  EXPECT_THROW(make_thread_communicators(0), Error);
}

}  // namespace
}  // namespace weft::comm
