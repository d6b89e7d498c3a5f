// The communicator contract, written once (conformance.h) and run over every implementation:
// every op and dtype with known values (rank r contributes r + 1; bf16 sums also of random values,
// comm/bf16_sums.h) on both paths of each (the MPI ring from 64 KiB; the staged communicator's
// chunks), in-place variants, async Work, split (colors, a reordering key, nested, the
// Topology's groups, concurrent collectives on the subgroups), point-to-point messages (tags,
// rings, pairs, polling), the argument errors, and receives that fail or time out.

#include "comm/conformance.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm/bf16_sums.h"
#include "support/thread_communicator.h"
#include "weft/comm/recording_communicator.h"
#include "weft/core/check.h"
#include "weft/core/dtype.h"
#include "weft/parallel/topology.h"

namespace weft::comm::test {

// ---- the fixture and the kinds whose ranks are threads ----

void Conformance::SetUp() {
  kind_ = GetParam().make();
  if (!kind_.skip.empty()) GTEST_SKIP() << kind_.skip;
}

void Conformance::on_groups(const Body& body, int min_size) {
  bool ran = false;
  for (const int size : kind_.sizes) {
    if (size < min_size) continue;
    SCOPED_TRACE("a group of " + std::to_string(size));
    kind_.run(size, "conformance", body);
    ran = true;
  }
  if (!ran) GTEST_SKIP() << "needs a group of at least " << min_size;
}

void Conformance::on_group(int size, const Body& body) {
  if (std::find(kind_.sizes.begin(), kind_.sizes.end(), size) == kind_.sizes.end()) {
    GTEST_SKIP() << "needs a group of " << size;
  }
  SCOPED_TRACE("a group of " + std::to_string(size));
  kind_.run(size, "conformance", body);
}

int Conformance::largest_group() {
  return *std::max_element(kind_.sizes.begin(), kind_.sizes.end());
}

std::string kind_name(const testing::TestParamInfo<KindFactory>& info) { return info.param.name; }

void run_on_threads(const std::vector<std::unique_ptr<Communicator>>& comms,
                    const std::function<std::unique_ptr<Memory>()>& make_memory, const Body& body) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Memory> memory = make_memory();
        body(*comms[r], *memory);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty message)";
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r << " of " << n << " threw";
  }
}

namespace {

std::unique_ptr<Memory> host_memory() { return std::make_unique<HostMemory>(); }

std::vector<std::unique_ptr<Communicator>> thread_ranks(int size, const std::string& name) {
  auto comms = make_thread_communicators(size, name);
  for (auto& c : comms) c->set_timeout_seconds(10);
  return comms;
}

}  // namespace

Kind thread_kind() {
  Kind k;
  k.sizes = {1, 2, 3, 4};
  k.run = [](int size, const std::string& name, const Body& body) {
    run_on_threads(thread_ranks(size, name), host_memory, body);
  };
  k.messages_to_self = true;
  k.truncation_says = ": the message (16 bytes) is longer than the receive buffer (8 bytes)";
  k.cancels_receives = true;
  return k;
}

Kind wrapped_thread_kind(
    std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>)> wrap) {
  Kind k = thread_kind();
  // A wrapper: the edge of one rank, and the size every test runs on (nested splits, tp x dp).
  k.sizes = {1, 4};
  k.run = [wrap](int size, const std::string& name, const Body& body) {
    std::vector<std::unique_ptr<Communicator>> comms;
    for (auto& c : thread_ranks(size, name)) comms.push_back(wrap(std::move(c)));
    run_on_threads(comms, host_memory, body);
  };
  return k;
}

Kind recording_kind() {
  auto rec = std::make_shared<CommRecorder>();
  return wrapped_thread_kind([rec](std::unique_ptr<Communicator> c) {
    return std::make_unique<RecordingCommunicator>(std::move(c), rec);
  });
}

// ---- the contract ----

namespace {

// 1 + 2 + ... + size: the sum of every rank's r + 1.
int64_t rank_sum(const Communicator& c) { return int64_t{c.size()} * (c.size() + 1) / 2; }
int next_rank(const Communicator& c) { return (c.rank() + 1) % c.size(); }
int prev_rank(const Communicator& c) { return (c.rank() + c.size() - 1) % c.size(); }

template <typename... Ts>
struct TypeList {};
using Reducible = TypeList<float, double, int32_t, int64_t>;
using AllTypes = TypeList<float, double, int32_t, int64_t, uint8_t>;  // U8 is moved, not reduced

// fn.template operator()<T>() for each T of the list.
template <typename... Ts, typename Fn>
void for_types(TypeList<Ts...>, Fn&& fn) {
  (fn.template operator()<Ts>(), ...);
}

template <typename T>
std::string_view type_name() {
  return dtype_name(data_type_of<T>());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// "recv on group 'conformance' (rank 1 of 2)": how every error names an operation.
std::string where(const char* op, const Communicator& c) {
  return std::string(op) + " on group '" + c.name() + "' (rank " + std::to_string(c.rank()) +
         " of " + std::to_string(c.size()) + ")";
}

BF16 bf16(float f) { return BF16::from_float(f); }

TEST_P(Conformance, IsTheGroupItWasMadeAsRanksInOrder) {
  on_groups([](Communicator& c, Memory& m) {
    EXPECT_EQ(c.name(), "conformance");
    ASSERT_GE(c.rank(), 0);
    ASSERT_LT(c.rank(), c.size());
    const std::vector<int32_t> mine = {c.rank(), c.size()};
    int32_t* all = m.put(std::vector<int32_t>(2 * c.size(), -1));
    c.all_gather(all, m.put(mine), 2);
    const auto got = m.get(all, 2 * c.size());
    for (int q = 0; q < c.size(); ++q) {
      EXPECT_EQ(got[2 * q], q) << "the rank at position " << q;
      EXPECT_EQ(got[2 * q + 1], c.size()) << "the size rank " << q << " sees";
    }
  });
}

TEST_P(Conformance, AllReduceSumsEveryRanksContribution) {
  on_groups([](Communicator& c, Memory& m) {
    for_types(Reducible{}, [&]<typename T>() {
      // Uneven slices, and both paths: the MPI ring from 64 KiB on; the staged communicator's
      // chunks from its 1 KiB staging buffer on.
      for (const int64_t n : {int64_t{1}, int64_t{37}, int64_t{1000}, int64_t{20011}}) {
        std::vector<T> v(n);
        for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>((c.rank() + 1) * (i % 7 + 1));
        T* d = m.put(v);
        c.all_reduce(d, n);
        v = m.get(d, n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(v[i], static_cast<T>(rank_sum(c) * (i % 7 + 1)))
              << type_name<T>() << " n " << n << ", element " << i;
        }
      }
    });
  });
}

TEST_P(Conformance, AllReduceMaxTakesTheLargest) {
  on_groups([](Communicator& c, Memory& m) {
    for_types(Reducible{}, [&]<typename T>() {
      for (const int64_t n : {int64_t{9}, int64_t{2501}}) {
        std::vector<T> v(n);
        for (int64_t i = 0; i < n; ++i) {
          v[i] = static_cast<T>(i % 2 ? (c.rank() + 1) : -(c.rank() + 1));
        }
        T* d = m.put(v);
        c.all_reduce(d, n, ReduceOp::Max);
        v = m.get(d, n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(v[i], static_cast<T>(i % 2 ? c.size() : -1))
              << type_name<T>() << " n " << n << ", element " << i;
        }
      }
    });
  });
}

TEST_P(Conformance, ReduceScatterGivesEachRankTheSumOfItsBlockAlsoInPlace) {
  const bool at_own_block = kind_.reduce_scatter_in_place_at_own_block;
  on_groups([&](Communicator& c, Memory& m) {
    for_types(Reducible{}, [&]<typename T>() {
      for (const int64_t n : {int64_t{37}, int64_t{2501}}) {
        std::vector<T> in(c.size() * n);
        for (size_t j = 0; j < in.size(); ++j) {
          in[j] = static_cast<T>((c.rank() + 1) * (j % 5 + 1));
        }
        T* din = m.put(in);
        T* dout = m.put(std::vector<T>(n, T{1}));
        c.reduce_scatter(dout, din, n);
        const std::vector<T> out = m.get(dout, n);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t j = c.rank() * n + i;
          ASSERT_EQ(out[i], static_cast<T>(rank_sum(c) * (j % 5 + 1)))
              << type_name<T>() << " n " << n << ", element " << i;
        }
        // In place: the result lands at the front of the input (MPI's form), or at this rank's
        // own block (NCCL's).
        T* result = din + (at_own_block ? c.rank() * n : 0);
        c.reduce_scatter(result, din, n);
        EXPECT_EQ(m.get(result, n), out) << type_name<T>() << " in place, n " << n;
      }
    });
  });
}

TEST_P(Conformance, AllGatherConcatenatesInRankOrderAlsoInPlace) {
  on_groups([](Communicator& c, Memory& m) {
    for_types(AllTypes{}, [&]<typename T>() {
      // Both paths: MPI_Iallgather below 64 KiB in all, the ring from there on (even of bytes),
      // whose blocks are just over the threshold (so the test stays small).
      const int64_t ring = (int64_t{64} << 10) / (c.size() * int64_t{sizeof(T)}) + 1;
      for (const int64_t n : {int64_t{7}, ring}) {
        std::vector<T> in(n);
        for (int64_t i = 0; i < n; ++i) in[i] = static_cast<T>(10 * (c.rank() + 1) + i);
        T* dout = m.put(std::vector<T>(c.size() * n, T{0}));
        c.all_gather(dout, m.put(in), n);
        const std::vector<T> out = m.get(dout, c.size() * n);
        for (int q = 0; q < c.size(); ++q) {
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(out[q * n + i], static_cast<T>(10 * (q + 1) + i))
                << type_name<T>() << " n " << n << ", block " << q << ", element " << i;
          }
        }
        // In place: this rank's input already sits in its block of the output.
        std::vector<T> buf(c.size() * n, T{0});
        std::copy(in.begin(), in.end(), buf.begin() + c.rank() * n);
        T* dbuf = m.put(buf);
        c.all_gather(dbuf, dbuf + c.rank() * n, n);
        EXPECT_EQ(m.get(dbuf, c.size() * n), out) << type_name<T>() << " in place, n " << n;
      }
    });
  });
}

TEST_P(Conformance, BroadcastCopiesTheRootsBufferFromEveryRoot) {
  on_groups([](Communicator& c, Memory& m) {
    for_types(AllTypes{}, [&]<typename T>() {
      for (const int64_t n : {int64_t{5}, int64_t{2501}}) {
        for (int root = 0; root < c.size(); ++root) {
          std::vector<T> v(n);
          for (int64_t i = 0; i < n; ++i) {
            v[i] = static_cast<T>(c.rank() == root ? 20 * (root + 1) + i : 99);
          }
          T* d = m.put(v);
          c.broadcast(d, n, root);
          v = m.get(d, n);
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(v[i], static_cast<T>(20 * (root + 1) + i))
                << type_name<T>() << " n " << n << ", root " << root << ", element " << i;
          }
        }
      }
    });
  });
}

TEST_P(Conformance, ZeroCountCollectivesComplete) {
  on_groups([](Communicator& c, Memory& m) {
    float* d = m.put(std::vector<float>{7.0f});
    c.all_reduce(d, 0);
    c.reduce_scatter(d, d, 0);
    c.all_gather(d, d, 0);
    c.broadcast(d, 0, c.size() - 1);
    EXPECT_EQ(m.get(d, 1), std::vector<float>{7.0f});
  });
}

TEST_P(Conformance, AWaitedWorkIsCompleteAndAnOrderedOneIsBoundedByWaitOrdered) {
  on_groups([](Communicator& c, Memory& m) {
    double* d = m.put(std::vector<double>(1000, c.rank() + 1.0));
    Work w = c.all_reduce_async(d, 1000, DataType::F64, ReduceOp::Sum);
    w.wait();
    EXPECT_TRUE(w.test());
    EXPECT_FALSE(w.pending());
    EXPECT_EQ(m.get(d, 1000), std::vector<double>(1000, static_cast<double>(rank_sum(c))));
    // order(): the backend's later work runs after the operation; wait_ordered() bounds it.
    Work o = c.all_reduce_async(d, 1000, DataType::F64, ReduceOp::Max);
    o.order();
    EXPECT_FALSE(o.pending());
    c.wait_ordered();
    EXPECT_EQ(m.get(d, 1000), std::vector<double>(1000, static_cast<double>(rank_sum(c))));
  });
}

// Several all-reduces in flight at once (the MPI bf16 ring advances when polled or waited, each
// with its own tag), polled in between, then waited in reverse order.
TEST_P(Conformance, AllReducesInFlightTogetherComplete) {
  on_groups([](Communicator& c, Memory& m) {
    BF16* a = m.put(std::vector<BF16>(5000, bf16(1)));
    BF16* b = m.put(std::vector<BF16>(7, bf16(2)));
    float* f = m.put(std::vector<float>(100, 1.0f));
    std::vector<Work> works;
    works.push_back(c.all_reduce_async(a, 5000, DataType::BF16, ReduceOp::Sum));
    works.push_back(c.all_reduce_async(f, 100, DataType::F32, ReduceOp::Sum));
    works.push_back(c.all_reduce_async(b, 7, DataType::BF16, ReduceOp::Max));
    for (int i = 0; i < 100; ++i) {
      for (Work& work : works) (void)work.test();
    }
    for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
    for (const BF16& x : m.get(a, 5000)) ASSERT_EQ(x.to_float(), c.size());
    for (const BF16& x : m.get(b, 7)) ASSERT_EQ(x.to_float(), 2.0f);
    for (float x : m.get(f, 100)) ASSERT_EQ(x, c.size());
  });
}

// Collectives and messages in flight together on two groups, completed in reverse order.
TEST_P(Conformance, OperationsOnSeveralGroupsInFlightTogetherAllComplete) {
  if (!kind_.tagged_messages) GTEST_SKIP() << "posts a receive before a send on every rank";
  on_groups(
      [](Communicator& c, Memory& m) {
        auto pairs = c.split(c.rank() / 2, c.rank(), "pairs");
        const int next = next_rank(c), prev = prev_rank(c);
        float* big = m.put(std::vector<float>(1 << 16, static_cast<float>(c.rank() + 1)));
        double* gathered = m.put(std::vector<double>(3 * c.size()));
        int64_t* pair_sum = m.put(std::vector<int64_t>(4, c.rank()));
        int32_t* ring_in = m.put(std::vector<int32_t>(8, -1));
        int64_t* maxed = m.put(std::vector<int64_t>{c.rank()});
        std::vector<Work> works;
        works.push_back(c.all_reduce_async(big, 1 << 16, DataType::F32, ReduceOp::Sum));
        works.push_back(c.recv_async(ring_in, 8, DataType::I32, prev, 3));
        works.push_back(pairs->all_reduce_async(pair_sum, 4, DataType::I64, ReduceOp::Sum));
        works.push_back(c.all_gather_async(gathered, m.put(std::vector<double>(3, 0.5 * c.rank())),
                                           3, DataType::F64));
        works.push_back(
            c.send_async(m.put(std::vector<int32_t>(8, c.rank())), 8, DataType::I32, next, 3));
        works.push_back(c.all_reduce_async(maxed, 1, DataType::I64, ReduceOp::Max));
        for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();

        for (float f : m.get(big, 1 << 16)) ASSERT_EQ(f, static_cast<float>(rank_sum(c)));
        EXPECT_EQ(m.get(ring_in, 8), std::vector<int32_t>(8, prev));
        int64_t expected_pair = 0;
        for (int r = 0; r < c.size(); ++r) expected_pair += r / 2 == c.rank() / 2 ? r : 0;
        EXPECT_EQ(m.get(pair_sum, 4), std::vector<int64_t>(4, expected_pair));
        const auto g = m.get(gathered, 3 * c.size());
        for (int r = 0; r < c.size(); ++r) EXPECT_EQ(g[3 * r + 2], 0.5 * r);
        EXPECT_EQ(m.get(maxed, 1)[0], c.size() - 1);
      },
      p2p_min());
}

TEST_P(Conformance, U8CannotBeReducedAndSaysSo) {
  on_groups([](Communicator& c, Memory& m) {
    uint8_t* u = m.put(std::vector<uint8_t>(4 * c.size(), 1));
    try {
      c.all_reduce(u, 4);
      ADD_FAILURE() << "an all_reduce of u8 was accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "all_reduce on group 'conformance'")) << e.what();
      EXPECT_TRUE(contains(e.what(), "u8 cannot be reduced")) << e.what();
    }
    EXPECT_THROW(c.reduce_scatter(u, u, 4), Error);
  });
}

// bf16 (comm/communicator.h): on groups of 1 to 4 (of 3, the ring's blocks split no count
// evenly; of 2, one add: exactly the sum rounded once).
TEST_P(Conformance, Bf16SumsMaxAndGathersOfSmallIntegersAreExact) {
  const bool at_own_block = kind_.reduce_scatter_in_place_at_own_block;
  on_groups([&](Communicator& c, Memory& m) {
    // Sums up to 70: integers that bf16 (8 significant bits) holds exactly, in any order.
    auto value = [](int rank, int64_t j) {
      return bf16(static_cast<float>((rank + 1) * (j % 7 + 1)));
    };
    // Fewer elements than ranks, blocks that do not divide evenly, and several tiles.
    for (const int64_t n : {0, 1, 3, 1000, 1001, 10007}) {
      std::vector<BF16> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = value(c.rank(), i);
      BF16* sum = m.put(v);
      BF16* max = m.put(v);
      c.all_reduce(sum, n);
      c.all_reduce(max, n, ReduceOp::Max);
      const auto s = m.get(sum, n), x = m.get(max, n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(s[i].to_float(), rank_sum(c) * (i % 7 + 1)) << "n " << n << ", element " << i;
        ASSERT_EQ(x[i].to_float(), c.size() * (i % 7 + 1)) << "n " << n << ", element " << i;
      }
    }
    const int64_t n = 37;
    std::vector<BF16> in(c.size() * n);
    for (int64_t j = 0; j < c.size() * n; ++j) in[j] = value(c.rank(), j);
    BF16* din = m.put(in);
    BF16* dout = m.put(std::vector<BF16>(n));
    c.reduce_scatter(dout, din, n);
    const auto out = m.get(dout, n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i].to_float(), rank_sum(c) * ((c.rank() * n + i) % 7 + 1)) << "element " << i;
    }
    BF16* result = din + (at_own_block ? c.rank() * n : 0);
    c.reduce_scatter(result, din, n);  // in place (see ReduceScatterGives...AlsoInPlace)
    const auto in_place = m.get(result, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(in_place[i].bits, out[i].bits) << "in place, " << i;
    BF16* gathered = m.put(std::vector<BF16>(c.size() * n));
    c.all_gather(gathered, dout, n);
    const auto g = m.get(gathered, c.size() * n);
    for (int q = 0; q < c.size(); ++q) {
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(g[q * n + i].to_float(), rank_sum(c) * ((q * n + i) % 7 + 1))
            << "block " << q << ", element " << i;
      }
    }
  });
}

TEST_P(Conformance, Bf16RandomSumsAreTheSameBitsOnEveryRankAndWithinAnUlpPerAdd) {
  on_groups([](Communicator& c, Memory& m) {
    const int64_t n = 10007;
    std::vector<BF16> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = weft::test::random_bf16(c.rank(), i);
    BF16* d = m.put(v);
    c.all_reduce(d, n);
    v = m.get(d, n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(weft::test::within_an_ulp_per_add(v[i], c.size(), i));
    }
    BF16* all = m.put(std::vector<BF16>(c.size() * n));
    c.all_gather(all, d, n);  // every rank's result, to compare the bits
    const auto a = m.get(all, c.size() * n);
    for (int q = 0; q < c.size(); ++q) {
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(a[q * n + i].bits, v[i].bits) << "rank " << q << ", element " << i;
      }
    }
    const int64_t k = 37;
    std::vector<BF16> in(c.size() * k);
    for (int64_t j = 0; j < c.size() * k; ++j) in[j] = weft::test::random_bf16(c.rank(), j);
    BF16* dout = m.put(std::vector<BF16>(k));
    c.reduce_scatter(dout, m.put(in), k);
    const auto out = m.get(dout, k);
    for (int64_t i = 0; i < k; ++i) {
      ASSERT_TRUE(weft::test::within_an_ulp_per_add(out[i], c.size(), c.rank() * k + i));
    }
  });
}

TEST_P(Conformance, BarrierIsPassedByEveryRank) {
  on_groups([](Communicator& c, Memory&) {
    for (int i = 0; i < 5; ++i) c.barrier();
  });
}

TEST_P(Conformance, SplitGroupsByColorOrderedByKeyAndRunsSubgroupsConcurrently) {
  on_groups([](Communicator& c, Memory& m) {
    const int color = c.rank() % 2;
    // key = -rank reverses the order: the highest old rank becomes rank 0.
    auto sub = c.split(color, -c.rank(), "half");
    ASSERT_NE(sub, nullptr);
    std::vector<int32_t> members;  // old ranks of this color, in the new order
    for (int r = c.size() - 1; r >= 0; --r) {
      if (r % 2 == color) members.push_back(r);
    }
    ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
    EXPECT_EQ(members[sub->rank()], c.rank());
    EXPECT_EQ(sub->name(), "half");
    EXPECT_EQ(c.name(), "conformance");
    // Both halves at once: each gathers its members' old ranks, in its own rank order, and sums.
    int32_t* mine = m.put(std::vector<int32_t>{c.rank()});
    for (int i = 0; i < 10; ++i) {
      int32_t* got = m.put(std::vector<int32_t>(sub->size(), -1));
      sub->all_gather(got, mine, 1);
      EXPECT_EQ(m.get(got, sub->size()), members);
      int64_t* s = m.put(std::vector<int64_t>{c.rank() + i});
      sub->all_reduce(s, 1);
      int64_t want = 0;
      for (int r : members) want += r + i;
      EXPECT_EQ(m.get(s, 1)[0], want);
    }
    sub->barrier();
    c.barrier();  // the parent still works after a split
  });
}

TEST_P(Conformance, SplitInheritsTheTimeout) {
  on_groups([](Communicator& c, Memory&) {
    c.set_timeout_seconds(42.0);
    auto a = c.split(0, c.rank(), "a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->timeout_seconds(), 42.0);
    a->set_timeout_seconds(7.0);
    EXPECT_EQ(a->split(0, a->rank(), "b")->timeout_seconds(), 7.0);
    EXPECT_EQ(c.timeout_seconds(), 42.0);
    c.set_timeout_seconds(10.0);
  });
}

TEST_P(Conformance, NestedSplitsFormTheirOwnGroups) {
  on_group(4, [](Communicator& c, Memory& m) {
    auto all = c.split(0, c.rank(), "all");
    ASSERT_NE(all, nullptr);
    EXPECT_EQ(all->size(), 4);
    EXPECT_EQ(all->rank(), c.rank());
    auto pair = all->split(all->rank() / 2, 0, "pair");  // equal keys: ordered by rank
    ASSERT_NE(pair, nullptr);
    EXPECT_EQ(pair->size(), 2);
    EXPECT_EQ(pair->rank(), c.rank() % 2);
    auto single = pair->split(pair->rank(), 0, "single");
    ASSERT_NE(single, nullptr);
    EXPECT_EQ(single->size(), 1);
    EXPECT_EQ(single->rank(), 0);
    int32_t* v = m.put(std::vector<int32_t>{c.rank()});
    pair->all_reduce(v, 1);
    EXPECT_EQ(m.get(v, 1)[0], (c.rank() / 2) * 4 + 1);  // {0,1} -> 1, {2,3} -> 5
    single->all_reduce(v, 1);
    EXPECT_EQ(m.get(v, 1)[0], (c.rank() / 2) * 4 + 1);
  });
}

// Every factorization tp * pp * dp of the group: the groups that split() forms are the
// Topology's groups, in its order, under the names given.
TEST_P(Conformance, SplitFormsTheTopologysGroupsForEveryGridShape) {
  on_groups([](Communicator& c, Memory& m) {
    const int world = c.size();
    for (int tp = 1; tp <= world; ++tp) {
      for (int pp = 1; tp * pp <= world; ++pp) {
        if (world % (tp * pp) != 0) continue;
        const parallel::GridShape shape{.tp = tp, .pp = pp, .dp = world / (tp * pp)};
        SCOPED_TRACE("tp=" + std::to_string(shape.tp) + " pp=" + std::to_string(shape.pp) +
                     " dp=" + std::to_string(shape.dp));
        const parallel::Topology topo(shape);
        const parallel::Coord me = topo.coord(c.rank());
        struct Axis {
          std::unique_ptr<Communicator> comm;
          std::vector<int> expected;
          int rank;
        };
        std::vector<Axis> axes;
        axes.push_back(
            {c.split(topo.tp_group_id(c.rank()), me.tp, "tp"), topo.tp_group(c.rank()), me.tp});
        axes.push_back(
            {c.split(topo.dp_group_id(c.rank()), me.dp, "dp"), topo.dp_group(c.rank()), me.dp});
        axes.push_back(
            {c.split(topo.pp_group_id(c.rank()), me.pp, "pp"), topo.pp_group(c.rank()), me.pp});
        for (Axis& a : axes) {
          ASSERT_NE(a.comm, nullptr);
          SCOPED_TRACE(a.comm->name());
          ASSERT_EQ(a.comm->size(), static_cast<int>(a.expected.size()));
          EXPECT_EQ(a.comm->rank(), a.rank);
          // Who is in my group, in the group's order: the group's ranks, gathered.
          int32_t* members = m.put(std::vector<int32_t>(a.comm->size(), -1));
          a.comm->all_gather(members, m.put(std::vector<int32_t>{c.rank()}), 1);
          const auto got = m.get(members, a.comm->size());
          EXPECT_EQ(std::vector<int>(got.begin(), got.end()), a.expected);
          int64_t* sum = m.put(std::vector<int64_t>{c.rank()});
          a.comm->all_reduce(sum, 1);
          EXPECT_EQ(m.get(sum, 1)[0],
                    std::accumulate(a.expected.begin(), a.expected.end(), int64_t{0}));
        }
        EXPECT_EQ(axes[0].comm->name(), "tp");
        EXPECT_EQ(axes[1].comm->name(), "dp");
        EXPECT_EQ(axes[2].comm->name(), "pp");
      }
    }
  });
}

// A group of 4 as tp=2 x dp=2: tp groups {0,1} and {2,3}, dp groups {0,2} and {1,3}.
TEST_P(Conformance, AGroupOf4AsTp2Dp2PairsTheRanksAsMegatronDoes) {
  on_group(4, [](Communicator& c, Memory& m) {
    const parallel::Topology topo({.tp = 2, .pp = 1, .dp = 2});
    auto tp = c.split(topo.tp_group_id(c.rank()), topo.coord(c.rank()).tp, "tp");
    auto dp = c.split(topo.dp_group_id(c.rank()), topo.coord(c.rank()).dp, "dp");
    int32_t* mine = m.put(std::vector<int32_t>{c.rank()});
    int32_t* tp_members = m.put(std::vector<int32_t>(2));
    int32_t* dp_members = m.put(std::vector<int32_t>(2));
    tp->all_gather(tp_members, mine, 1);
    dp->all_gather(dp_members, mine, 1);
    const std::vector<std::vector<int32_t>> tp_of = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
    const std::vector<std::vector<int32_t>> dp_of = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    EXPECT_EQ(m.get(tp_members, 2), tp_of[c.rank()]);
    EXPECT_EQ(m.get(dp_members, 2), dp_of[c.rank()]);
  });
}

// Each check before any message, on every rank.
TEST_P(Conformance, BadPeersRootsCountsTagsAndColorsAreErrors) {
  const bool no_color_is_no_group = kind_.negative_color_joins_no_group;
  on_groups([&](Communicator& c, Memory& m) {
    float* x = m.put(std::vector<float>{0.0f});
    EXPECT_THROW(c.send(x, 1, c.size()), Error);
    EXPECT_THROW(c.recv(x, 1, -1), Error);
    EXPECT_THROW(c.send(x, 1, next_rank(c), -3), Error);
    EXPECT_THROW(c.send(x, -1, next_rank(c)), Error);
    EXPECT_THROW(c.all_reduce(x, -1), Error);
    EXPECT_THROW(c.broadcast(x, 1, c.size()), Error);
    if (no_color_is_no_group) {
      EXPECT_EQ(c.split(-1, 0, "none"), nullptr);
    } else {
      EXPECT_THROW(c.split(-1, 0, "bad"), Error);
    }
  });
}

// ---- point-to-point ----

TEST_P(Conformance, SendAndRecvPassARingAroundInEveryType) {
  if (!kind_.tagged_messages) GTEST_SKIP() << "posts a receive before a send on every rank";
  on_groups(
      [](Communicator& c, Memory& m) {
        const int next = next_rank(c), prev = prev_rank(c);
        for_types(AllTypes{}, [&]<typename T>() {
          const int64_t n = 11;
          std::vector<T> out(n);
          for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(30 * (c.rank() + 1) + i);
          T* in = m.put(std::vector<T>(n, T{0}));
          Work r = c.recv_async(in, n, data_type_of<T>(), prev, 5);
          Work s = c.send_async(m.put(out), n, data_type_of<T>(), next, 5);
          s.wait();
          r.wait();
          const auto got = m.get(in, n);
          for (int64_t i = 0; i < n; ++i) {
            EXPECT_EQ(got[i], static_cast<T>(30 * (prev + 1) + i)) << type_name<T>() << " " << i;
          }
        });
      },
      p2p_min());
}

// Every rank sends to the next one before receiving from the previous one, with messages above
// MPI's eager limit: this completes because send_async does not wait for the receive (as the
// pipeline runner needs). Two messages per pair, with different tags, arrive in order.
TEST_P(Conformance, AsyncSendsBeforeReceivesGoAroundARing) {
  if (!kind_.tagged_messages) GTEST_SKIP() << "sends before receiving on every rank";
  if (largest_group() < p2p_min()) GTEST_SKIP() << "needs a group with peers";
  on_group(largest_group(), [](Communicator& c, Memory& m) {
    const int next = next_rank(c), prev = prev_rank(c);
    const int64_t big = int64_t{1} << 20, small = 100000;  // 4 MB and 400 KB
    auto values = [](int rank, int64_t n, int salt) {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank * 1000 + (i + salt) % 997);
      return v;
    };
    Work wa = c.send_async(m.put(values(c.rank(), big, 1)), big, DataType::F32, next, 1);
    Work wb = c.send_async(m.put(values(c.rank(), small, 2)), small, DataType::F32, next, 2);
    float* ra = m.put(std::vector<float>(big, -1.0f));
    float* rb = m.put(std::vector<float>(small, -1.0f));
    c.recv(ra, big, prev, 1);
    Work w = c.recv_async(rb, small, DataType::F32, prev, 2);
    w.wait();
    wa.wait();
    wb.wait();
    EXPECT_EQ(m.get(ra, big), values(prev, big, 1));
    EXPECT_EQ(m.get(rb, small), values(prev, small, 2));
  });
}

// Receives match by tag whatever the order of the sends, and receives of one tag posted before
// their messages arrive match them in the order they were posted.
TEST_P(Conformance, ReceivesMatchByTagAndKeepEachTagsOrder) {
  if (!kind_.tagged_messages) GTEST_SKIP() << "NCCL matches messages by order, not tag";
  on_groups(
      [](Communicator& c, Memory& m) {
        const int next = next_rank(c), prev = prev_rank(c);
        std::vector<Work> sends;
        sends.push_back(c.send_async(m.put(std::vector<int64_t>{100 + c.rank()}), 1, DataType::I64,
                                     next, /*tag=*/1));
        sends.push_back(c.send_async(m.put(std::vector<int64_t>{200 + c.rank()}), 1, DataType::I64,
                                     next, /*tag=*/0));
        int64_t* v = m.put(std::vector<int64_t>{-1});
        c.recv(v, 1, prev, /*tag=*/0);
        EXPECT_EQ(m.get(v, 1)[0], 200 + prev);
        c.recv(v, 1, prev, /*tag=*/1);
        EXPECT_EQ(m.get(v, 1)[0], 100 + prev);
        int64_t* x = m.put(std::vector<int64_t>{-1});
        int64_t* y = m.put(std::vector<int64_t>{-1});
        int64_t* z = m.put(std::vector<int64_t>{-1});
        Work wx = c.recv_async(x, 1, DataType::I64, prev, 5);
        Work wy = c.recv_async(y, 1, DataType::I64, prev, 5);
        Work wz = c.recv_async(z, 1, DataType::I64, prev, 5);
        c.barrier();  // every receive is posted before any of these messages is sent
        for (int64_t i = 10; i < 13; ++i) {
          sends.push_back(c.send_async(m.put(std::vector<int64_t>{i}), 1, DataType::I64, next, 5));
        }
        wz.wait();
        wy.wait();
        wx.wait();
        EXPECT_EQ(m.get(x, 1)[0], 10);
        EXPECT_EQ(m.get(y, 1)[0], 11);
        EXPECT_EQ(m.get(z, 1)[0], 12);
        for (Work& s : sends) s.wait();
      },
      p2p_min());
}

TEST_P(Conformance, RecvWorkCanBePolledUntilTheMessageArrives) {
  if (!kind_.tagged_messages) GTEST_SKIP() << "posts a receive before a send on every rank";
  on_groups(
      [](Communicator& c, Memory& m) {
        int32_t* v = m.put(std::vector<int32_t>{-1});
        Work r = c.recv_async(v, 1, DataType::I32, prev_rank(c), 0);
        c.barrier();  // the peer sends after this
        Work s = c.send_async(m.put(std::vector<int32_t>{42 + c.rank()}), 1, DataType::I32,
                              next_rank(c), 0);
        while (!r.test()) std::this_thread::yield();
        r.wait();
        s.wait();
        EXPECT_EQ(m.get(v, 1)[0], 42 + prev_rank(c));
      },
      p2p_min());
}

TEST_P(Conformance, ZeroLengthMessagesArrive) {
  if (!kind_.tagged_messages) GTEST_SKIP() << "posts a receive before a send on every rank";
  on_groups(
      [](Communicator& c, Memory& m) {
        float* d = m.put(std::vector<float>{3.0f});
        Work r = c.recv_async(d, 0, DataType::F32, prev_rank(c), 4);
        c.send(d, 0, next_rank(c), 4);
        r.wait();
        EXPECT_EQ(m.get(d, 1), std::vector<float>{3.0f});
      },
      p2p_min());
}

// The pattern that works on every kind, NCCL's included: pairs exchange in an agreed order (even
// ranks send first), with messages above MPI's eager limit.
TEST_P(Conformance, MessagesPassBetweenPairsInAnAgreedOrder) {
  on_groups(
      [](Communicator& c, Memory& m) {
        const int peer = c.rank() ^ 1;
        if (peer >= c.size()) return;
        const int64_t n = 100000;
        auto values = [n](int rank) {
          std::vector<float> v(n);
          for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(((rank + 1) * i) % 97 - 40);
          return v;
        };
        float* out = m.put(values(c.rank()));
        float* in = m.put(std::vector<float>(n, 0.0f));
        if (c.rank() % 2 == 0) {
          c.send(out, n, peer);
          c.recv(in, n, peer);
        } else {
          c.recv(in, n, peer);
          c.send(out, n, peer);
        }
        EXPECT_EQ(m.get(in, n), values(peer));
      },
      2);
}

// ---- failed and timed-out receives ----

TEST_P(Conformance, AReceiveIntoTooSmallABufferIsAnErrorNamingItsMessage) {
  if (kind_.truncation_says.empty()) GTEST_SKIP() << "not checked for this kind";
  const std::string says = kind_.truncation_says;
  on_groups(
      [&](Communicator& c, Memory& m) {
        auto t = c.split(0, c.rank(), "truncating");
        const int prev = prev_rank(*t);
        float* two = m.put(std::vector<float>(2, 0.0f));
        Work s =
            t->send_async(m.put(std::vector<float>(4, 1.0f)), 4, DataType::F32, next_rank(*t), 1);
        try {
          t->recv(two, 2, prev, 1);  // 4 floats do not fit in 2
          ADD_FAILURE() << "a truncated receive was accepted";
        } catch (const Error& e) {
          EXPECT_TRUE(contains(e.what(), where("recv", *t) + says)) << e.what();
          EXPECT_TRUE(contains(e.what(), "from rank " + std::to_string(prev) + ", tag 1"))
              << e.what();
        }
        s.wait();
        t->barrier();
      },
      p2p_min());
}

// A receive that nothing matches gives up after the timeout naming the op, group, peer and tag,
// and is cancelled, as is one dropped unwaited: the group still works, and a later message with
// the same tag goes to a new receive. A collective dropped unwaited completes.
TEST_P(Conformance, ATimedOutOrDroppedReceiveIsCancelledAndTheNextOneGetsTheMessage) {
  if (!kind_.cancels_receives) GTEST_SKIP() << "not checked for this kind";
  if (largest_group() < p2p_min()) GTEST_SKIP() << "needs a group with peers";
  on_group(largest_group(), [](Communicator& c, Memory& m) {
    auto lonely = c.split(0, c.rank(), "lonely");
    const int prev = prev_rank(*lonely);
    float* x = m.put(std::vector<float>{-1.0f});
    lonely->set_timeout_seconds(0.2);
    const auto start = std::chrono::steady_clock::now();
    try {
      lonely->recv(x, 1, prev, 77);
      ADD_FAILURE() << "a receive nobody matched returned";
    } catch (const Error& e) {
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_GE(took, 0.2);
      EXPECT_LT(took, 1.2);
      // What every communicator says; MPI goes on with the world ranks and hosts.
      EXPECT_TRUE(std::string(e.what()).starts_with(where("recv", *lonely) +
                                                    " timed out after 0.2 s (1 f32 from rank " +
                                                    std::to_string(prev) + ", tag 77)"))
          << e.what();
    }
    lonely->set_timeout_seconds(10);
    float* stale = m.put(std::vector<float>{-1.0f});
    { Work dropped = lonely->recv_async(stale, 1, DataType::F32, prev, 77); }
    float* sum = m.put(std::vector<float>{1.0f});
    { Work dropped = lonely->all_reduce_async(sum, 1, DataType::F32, ReduceOp::Sum); }
    EXPECT_EQ(m.get(sum, 1)[0], static_cast<float>(lonely->size()));
    lonely->barrier();
    Work r = lonely->recv_async(x, 1, DataType::F32, prev, 77);
    lonely->send(m.put(std::vector<float>{lonely->rank() + 1.0f}), 1, next_rank(*lonely), 77);
    r.wait();
    EXPECT_EQ(m.get(x, 1)[0], static_cast<float>(prev + 1));
    EXPECT_EQ(m.get(stale, 1)[0], -1.0f);
  });
}

}  // namespace
}  // namespace weft::comm::test
