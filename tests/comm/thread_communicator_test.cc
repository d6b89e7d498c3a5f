// The thread backend on 1 to 4 threads: every op and dtype against values computed here (rank r
// contributes r + 1; bf16 sums also of random values, comm/bf16_sums.h), in-place variants, split
// (colors, a reordering key, nested, concurrent collectives on the subgroups), eager sends, tag
// matching, timeouts, mismatched collectives, and the process groups of parallel::make_groups over
// a thread world.

#include "weft/comm/thread_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/bf16_sums.h"
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

// 1 + 2 + ... + size: the sum of every rank's r + 1.
int64_t rank_sum(const Communicator& c) { return int64_t{c.size()} * (c.size() + 1) / 2; }

constexpr int kSizes[] = {1, 2, 3, 4};

template <typename T>
class ThreadReduce : public testing::Test {};
using ReducibleTypes = testing::Types<float, double, int32_t, int64_t>;
TYPED_TEST_SUITE(ThreadReduce, ReducibleTypes);

TYPED_TEST(ThreadReduce, AllReduceSumsEveryRanksContribution) {
  using T = TypeParam;
  // 10007 elements: several tiles per rank, and slices that do not divide evenly.
  for (const int64_t n : {int64_t{1}, int64_t{37}, int64_t{10007}}) {
    for (int size : kSizes) {
      run_ok(size, [n](Communicator& w) {
        std::vector<T> v(n);
        for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>((w.rank() + 1) * (i % 7 + 1));
        w.all_reduce(v.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(v[i], static_cast<T>(rank_sum(w) * (i % 7 + 1))) << "element " << i;
        }
      });
    }
  }
}

TYPED_TEST(ThreadReduce, AllReduceMaxTakesTheLargest) {
  using T = TypeParam;
  for (int size : kSizes) {
    run_ok(size, [](Communicator& w) {
      std::vector<T> v(9);
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = static_cast<T>(i % 2 ? (w.rank() + 1) : -(w.rank() + 1));
      }
      w.all_reduce(v.data(), static_cast<int64_t>(v.size()), ReduceOp::Max);
      for (size_t i = 0; i < v.size(); ++i) {
        EXPECT_EQ(v[i], static_cast<T>(i % 2 ? w.size() : -1)) << "element " << i;
      }
    });
  }
}

TYPED_TEST(ThreadReduce, ReduceScatterGivesEachRankTheSumOfItsBlockAlsoInPlace) {
  using T = TypeParam;
  for (int size : kSizes) {
    run_ok(size, [](Communicator& w) {
      const int64_t n = 37;
      std::vector<T> in(w.size() * n), out(n, T{-1});
      for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<T>((w.rank() + 1) * (j % 5 + 1));
      w.reduce_scatter(out.data(), in.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = w.rank() * n + i;
        ASSERT_EQ(out[i], static_cast<T>(rank_sum(w) * (j % 5 + 1))) << "element " << i;
      }
      // In place: the result lands at the front of the input, which rank 0's block is read from.
      w.reduce_scatter(in.data(), in.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(in[i], out[i]) << "in place, element " << i;
    });
  }
}

template <typename T>
class ThreadMove : public testing::Test {};
using AllTypes = testing::Types<float, double, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(ThreadMove, AllTypes);

TYPED_TEST(ThreadMove, AllGatherConcatenatesInRankOrderAlsoInPlace) {
  using T = TypeParam;
  for (int size : kSizes) {
    run_ok(size, [](Communicator& w) {
      const int64_t n = 5;
      std::vector<T> in(n), out(w.size() * n, T{0});
      for (int64_t i = 0; i < n; ++i) in[i] = static_cast<T>(10 * w.rank() + i);
      w.all_gather(out.data(), in.data(), n);
      for (int q = 0; q < w.size(); ++q) {
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(out[q * n + i], static_cast<T>(10 * q + i)) << "block " << q << " elt " << i;
        }
      }
      // In place: this rank's input already sits in its block of the output.
      std::vector<T> buf(w.size() * n, T{0});
      for (int64_t i = 0; i < n; ++i) buf[w.rank() * n + i] = in[i];
      w.all_gather(buf.data(), buf.data() + w.rank() * n, n);
      EXPECT_EQ(buf, out);
    });
  }
}

TYPED_TEST(ThreadMove, BroadcastCopiesTheRootsDataFromEveryRoot) {
  using T = TypeParam;
  for (int size : kSizes) {
    run_ok(size, [](Communicator& w) {
      for (int root = 0; root < w.size(); ++root) {
        std::vector<T> v(6);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(w.rank() * 20 + i);
        w.broadcast(v.data(), static_cast<int64_t>(v.size()), root);
        for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<T>(root * 20 + i));
      }
    });
  }
}

TEST(ThreadCommunicator, ZeroCountCollectivesComplete) {
  run_ok(3, [](Communicator& w) {
    float x = 7;
    w.all_reduce(&x, 0);
    w.reduce_scatter(&x, &x, 0);
    w.all_gather(&x, &x, 0);
    w.broadcast(&x, 0, 1);
    EXPECT_EQ(x, 7);
  });
}

TEST(ThreadCommunicator, AsyncCollectivesReturnCompletedWork) {
  run_ok(2, [](Communicator& w) {
    double v = w.rank() + 1;
    Work work = w.all_reduce_async(&v, 1, DataType::F64, ReduceOp::Sum);
    EXPECT_TRUE(work.test());
    work.wait();
    EXPECT_EQ(v, 3.0);
  });
}

TEST(ThreadCommunicator, U8CannotBeReducedOnAnyRank) {
  const auto errors = run_ranks(2, [](Communicator& w) {
    uint8_t v = 1;
    w.all_reduce_async(&v, 1, DataType::U8, ReduceOp::Sum).wait();
  });
  for (const auto& e : errors) EXPECT_NE(e.find("u8 cannot be reduced"), std::string::npos) << e;
}

// bf16 (comm/communicator.h): each add in fp32, rounded to bf16, in rank order.
BF16 bf16(float f) { return BF16::from_float(f); }

TEST(ThreadBf16, SumsMaxAndGathersOfSmallIntegersAreExact) {
  // Sums up to 70: integers that bf16 (8 significant bits) holds exactly, in any order.
  auto value = [](int rank, int64_t j) {
    return bf16(static_cast<float>((rank + 1) * (j % 7 + 1)));
  };
  for (int size : kSizes) {
    run_ok(size, [&](Communicator& w) {
      for (const int64_t n : {int64_t{1}, int64_t{37}, int64_t{10007}}) {
        std::vector<BF16> sum(n), max(n);
        for (int64_t i = 0; i < n; ++i) sum[i] = max[i] = value(w.rank(), i);
        w.all_reduce(sum.data(), n);
        w.all_reduce(max.data(), n, ReduceOp::Max);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(sum[i].to_float(), rank_sum(w) * (i % 7 + 1)) << "n " << n << ", element " << i;
          ASSERT_EQ(max[i].to_float(), w.size() * (i % 7 + 1)) << "n " << n << ", element " << i;
        }
      }
      const int64_t n = 37;
      std::vector<BF16> in(w.size() * n), out(n), gathered(w.size() * n);
      for (int64_t j = 0; j < w.size() * n; ++j) in[j] = value(w.rank(), j);
      w.reduce_scatter(out.data(), in.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i].to_float(), rank_sum(w) * ((w.rank() * n + i) % 7 + 1)) << "element " << i;
      }
      w.reduce_scatter(in.data(), in.data(), n);  // in place: the result at the front
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(in[i].bits, out[i].bits) << "in place, " << i;
      w.all_gather(gathered.data(), out.data(), n);
      for (int q = 0; q < w.size(); ++q) {
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(gathered[q * n + i].to_float(), rank_sum(w) * ((q * n + i) % 7 + 1))
              << "block " << q << ", element " << i;
        }
      }
    });
  }
}

TEST(ThreadBf16, RandomSumsAreTheSameBitsOnEveryRankAndWithinAnUlpPerAdd) {
  for (int size : kSizes) {
    const int64_t n = 10007;
    std::vector<std::vector<BF16>> sums(size);  // each rank's all-reduce result
    run_ok(size, [&](Communicator& w) {
      std::vector<BF16>& v = sums[w.rank()];
      v.resize(n);
      for (int64_t i = 0; i < n; ++i) v[i] = test::random_bf16(w.rank(), i);
      w.all_reduce(v.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(test::within_an_ulp_per_add(v[i], w.size(), i));
      const int64_t m = 37;
      std::vector<BF16> in(w.size() * m), out(m);
      for (int64_t j = 0; j < w.size() * m; ++j) in[j] = test::random_bf16(w.rank(), j);
      w.reduce_scatter(out.data(), in.data(), m);
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_TRUE(test::within_an_ulp_per_add(out[i], w.size(), w.rank() * m + i));
      }
    });
    for (int r = 1; r < size; ++r) {
      ASSERT_EQ(sums[r].size(), sums[0].size());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(sums[r][i].bits, sums[0][i].bits) << "rank " << r << " of " << size << ", " << i;
      }
    }
  }
}

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

TEST(ThreadCommunicator, SplitGroupsByColorOrderedByKeyAndRunsSubgroupsConcurrently) {
  for (int size : kSizes) {
    run_ok(size, [](Communicator& w) {
      const int color = w.rank() % 2;
      // key = -rank reverses the order: the highest old rank becomes rank 0.
      auto sub = w.split(color, -w.rank(), "half");
      std::vector<int> members;  // old ranks of this color, in the new order
      for (int r = w.size() - 1; r >= 0; --r) {
        if (r % 2 == color) members.push_back(r);
      }
      ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
      EXPECT_EQ(members[sub->rank()], w.rank());
      EXPECT_EQ(sub->name(), "half");
      // Both halves at once: each gathers its members' old ranks, in its own rank order, and sums.
      for (int i = 0; i < 10; ++i) {
        int32_t mine = w.rank();
        std::vector<int32_t> got(sub->size());
        sub->all_gather(got.data(), &mine, 1);
        EXPECT_EQ(got, members);
        int64_t s = w.rank() + i;
        sub->all_reduce(&s, 1);
        int64_t want = 0;
        for (int m : members) want += m + i;
        EXPECT_EQ(s, want);
      }
      w.barrier();  // the parent still works after a split
    });
  }
}

TEST(ThreadCommunicator, NestedSplitsFormTheirOwnGroups) {
  run_ok(4, [](Communicator& w) {
    auto all = w.split(0, w.rank(), "all");
    EXPECT_EQ(all->size(), 4);
    EXPECT_EQ(all->rank(), w.rank());
    auto pair = all->split(all->rank() / 2, 0, "pair");  // equal keys: ordered by rank
    EXPECT_EQ(pair->size(), 2);
    EXPECT_EQ(pair->rank(), w.rank() % 2);
    auto single = pair->split(pair->rank(), 0, "single");
    EXPECT_EQ(single->size(), 1);
    EXPECT_EQ(single->rank(), 0);
    int32_t v = w.rank();
    pair->all_reduce(&v, 1);
    EXPECT_EQ(v, (w.rank() / 2) * 4 + 1);  // {0,1} -> 1, {2,3} -> 5
    single->all_reduce(&v, 1);
    EXPECT_EQ(v, (w.rank() / 2) * 4 + 1);
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

TEST(ThreadCommunicator, ReceivesMatchByTagAndKeepEachTagsOrder) {
  run_ok(2, [](Communicator& w) {
    if (w.rank() == 0) {
      const int64_t a = 1, b = 0;
      w.send(&a, 1, 1, /*tag=*/1);
      w.send(&b, 1, 1, /*tag=*/0);
      for (int64_t i = 10; i < 13; ++i) w.send(&i, 1, 1, /*tag=*/5);
    } else {
      int64_t v = -1;
      w.recv(&v, 1, 0, /*tag=*/0);
      EXPECT_EQ(v, 0);
      w.recv(&v, 1, 0, /*tag=*/1);
      EXPECT_EQ(v, 1);
      // Receives posted before the messages arrive match them in the order they were posted.
      int64_t x = -1, y = -1, z = -1;
      Work wx = w.recv_async(&x, 1, DataType::I64, 0, 5);
      Work wy = w.recv_async(&y, 1, DataType::I64, 0, 5);
      Work wz = w.recv_async(&z, 1, DataType::I64, 0, 5);
      wz.wait();
      wy.wait();
      wx.wait();
      EXPECT_EQ(x, 10);
      EXPECT_EQ(y, 11);
      EXPECT_EQ(z, 12);
    }
  });
}

TEST(ThreadCommunicator, RecvWorkCanBePolledUntilTheMessageArrives) {
  run_ok(2, [](Communicator& w) {
    int32_t v = -1;
    if (w.rank() == 1) {
      Work work = w.recv_async(&v, 1, DataType::I32, 0, 0);
      w.barrier();  // rank 0 sends after this
      while (!work.test()) std::this_thread::yield();
      work.wait();
      EXPECT_EQ(v, 42);
    } else {
      w.barrier();
      v = 42;
      w.send(&v, 1, 1);
    }
  });
}

TEST(ThreadCommunicator, AMessageLongerThanTheReceiveBufferIsAnError) {
  const auto errors = run_ranks(2, [](Communicator& w) {
    std::vector<float> v(8, 1.f);
    if (w.rank() == 0) w.send(v.data(), 8, 1);
    if (w.rank() == 1) w.recv(v.data(), 4, 0);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("recv on group 'world' (rank 1 of 2): the message (32 bytes) is longer"),
            std::string::npos)
      << errors[1];
}

TEST(ThreadCommunicator, PointToPointArgumentsAreChecked) {
  run_ok(2, [](Communicator& w) {
    float v = 0;
    EXPECT_THROW(w.send(&v, 1, 2), Error);
    EXPECT_THROW(w.recv(&v, 1, -1), Error);
    EXPECT_THROW(w.send(&v, 1, 0, -3), Error);
    EXPECT_THROW(w.send(&v, -1, 0), Error);
  });
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

TEST(ThreadCommunicator, ATimedOutReceiveIsCancelledAndTheNextOneGetsTheMessage) {
  run_ok(2, [](Communicator& w) {
    int32_t v = -1;
    if (w.rank() == 0) {
      w.set_timeout_seconds(0.2);
      try {
        w.recv(&v, 1, 1, 4);
        ADD_FAILURE() << "recv returned without a message";
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "recv on group 'world' (rank 0 of 2) timed out after 0.2 s (1 i32 from rank 1, "
                  "tag 4)");
      }
      {
        // A receive dropped unwaited is cancelled too.
        int32_t dropped = -1;
        Work unwaited = w.recv_async(&dropped, 1, DataType::I32, 1, 4);
      }
      w.set_timeout_seconds(10);
      w.barrier();
      w.recv(&v, 1, 1, 4);
      EXPECT_EQ(v, 7);
    } else {
      w.barrier();
      v = 7;
      w.send(&v, 1, 0, 4);
    }
  });
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
