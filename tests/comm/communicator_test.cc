// The Local backend (a group of one): the communicator contract (conformance.h) and what is its
// own; and what every Communicator shares: dtypes, payload_of, reduce_into's bf16 rounding, the
// timeout.

#include "weft/comm/communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "comm/conformance.h"
#include "weft/core/check.h"
#include "weft/core/dtype.h"

namespace weft::comm {
namespace {

// Sets an environment variable for one scope and restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DataType, SizesAndNamesAreTheElementTypes) {
  EXPECT_EQ(dtype_size(DataType::F32), 4u);
  EXPECT_EQ(dtype_size(DataType::F64), 8u);
  EXPECT_EQ(dtype_size(DataType::I32), 4u);
  EXPECT_EQ(dtype_size(DataType::I64), 8u);
  EXPECT_EQ(dtype_size(DataType::U8), 1u);
  EXPECT_EQ(dtype_name(DataType::F32), "f32");
  EXPECT_EQ(dtype_name(DataType::U8), "u8");
  EXPECT_EQ(reduce_op_name(ReduceOp::Sum), "sum");
  EXPECT_EQ(reduce_op_name(ReduceOp::Max), "max");
  static_assert(data_type_of<int64_t>() == DataType::I64);
  static_assert(data_type_of<uint8_t>() == DataType::U8);
}

TEST(DataType, Bf16IsTwoByteElementsAndWhatPayloadOfSendsThem) {
  EXPECT_EQ(dtype_size(DataType::BF16), 2u);
  EXPECT_EQ(dtype_name(DataType::BF16), "bf16");
  static_assert(data_type_of<BF16>() == DataType::BF16);
  // fp32 and bf16 go as elements (reducible, counted as the planner counts), others as bytes.
  for (const auto& [bytes, count, type] :
       {std::tuple{4, 10, DataType::F32}, std::tuple{2, 10, DataType::BF16},
        std::tuple{8, 80, DataType::U8}, std::tuple{1, 10, DataType::U8}}) {
    const Payload p = payload_of(10, bytes);
    EXPECT_EQ(p.count, count) << bytes << "-byte elements";
    EXPECT_EQ(p.type, type) << bytes << "-byte elements";
  }
}

// bf16 near 1 has an ulp of u = 2^-7. Each case's fp32 sum is exact, so its result shows how
// reduce_into rounds it: to nearest, ties to the even neighbour (the last mantissa bit 0).
TEST(ReduceInto, Bf16SumsRoundOnceToNearestEven) {
  const float u = 0.0078125f;
  struct Case {
    float a, b, want;
    const char* why;
  };
  const Case cases[] = {
      {1, u / 2, 1, "a tie rounds down to the even 1 (not up, as round-half-up would)"},
      {1 + u, u / 2, 1 + 2 * u, "a tie rounds up to the even 1 + 2u (not down, as truncation)"},
      {1, u / 2 + u / 8, 1 + u, "above the tie rounds up (not down, as truncation)"},
      {1 + u, 3 * u / 8, 1 + u, "below the tie rounds down"},
      {-1 - u, -u / 2, -1 - 2 * u, "a negative tie rounds to the even one too"},
  };
  std::vector<BF16> dst, src;
  for (const Case& c : cases) {
    dst.push_back(BF16::from_float(c.a));
    src.push_back(BF16::from_float(c.b));
    ASSERT_EQ(dst.back().to_float(), c.a) << "an input is not a bf16: " << c.why;
    ASSERT_EQ(src.back().to_float(), c.b) << "an input is not a bf16: " << c.why;
  }
  reduce_into(dst.data(), src.data(), static_cast<int64_t>(dst.size()), DataType::BF16,
              ReduceOp::Sum);
  for (size_t i = 0; i < dst.size(); ++i) {
    EXPECT_EQ(dst[i].to_float(), cases[i].want)
        << cases[i].a << " + " << cases[i].b << ": " << cases[i].why;
  }
}

TEST(ReduceInto, Bf16SumsDependOnTheOrderAndMaxPicksAnOperand) {
  // Each add rounds: (1 + u/2) + u/2 ties to 1 twice, 1 + (u/2 + u/2) is 1 + u.
  const BF16 one = BF16::from_float(1), half_ulp = BF16::from_float(0.00390625f);
  BF16 left = one, right = half_ulp;
  reduce_into(&left, &half_ulp, 1, DataType::BF16, ReduceOp::Sum);
  reduce_into(&left, &half_ulp, 1, DataType::BF16, ReduceOp::Sum);
  reduce_into(&right, &half_ulp, 1, DataType::BF16, ReduceOp::Sum);
  reduce_into(&right, &one, 1, DataType::BF16, ReduceOp::Sum);
  EXPECT_EQ(left.to_float(), 1.0f);
  EXPECT_EQ(right.to_float(), 1.0078125f);

  std::vector<BF16> a = {BF16::from_float(1.0078125f), BF16::from_float(-2)};
  const std::vector<BF16> b = {BF16::from_float(1), BF16::from_float(-3)};
  reduce_into(a.data(), b.data(), 2, DataType::BF16, ReduceOp::Max);
  EXPECT_EQ(a[0].to_float(), 1.0078125f);
  EXPECT_EQ(a[1].to_float(), -2.0f);
}

TEST(Work, ADefaultWorkIsAlreadyComplete) {
  Work w;
  EXPECT_FALSE(w.pending());
  w.wait();
}

TEST(Work, WaitRunsTheWaitOnce) {
  int calls = 0;
  Work w([&] { ++calls; });
  EXPECT_TRUE(w.pending());
  w.wait();
  w.wait();
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(w.pending());
}

test::Kind local_kind() {
  test::Kind k;
  k.sizes = {1};
  k.run = [](int, const std::string& name, const test::Body& body) {
    test::HostMemory memory;
    body(*make_local_communicator(name), memory);
  };
  return k;
}

using test::Conformance;
INSTANTIATE_TEST_SUITE_P(Local, Conformance,
                         testing::Values(test::KindFactory{"Local", local_kind}), test::kind_name);

TEST(LocalCommunicator, IsNamedWorldByDefault) {
  EXPECT_EQ(make_local_communicator()->name(), "world");
}

TEST(LocalCommunicator, AsyncOpsAreCompleteAtOnce) {
  auto c = make_local_communicator();
  float x = 1.0f;
  Work w = c->all_reduce_async(&x, 1, DataType::F32, ReduceOp::Sum);
  EXPECT_FALSE(w.pending());
  w.wait();
  c->barrier();
}

TEST(LocalCommunicator, SendAndRecvHaveNoPeer) {
  auto c = make_local_communicator("pp");
  float x = 0.0f;
  try {
    c->send(&x, 1, 0);
    FAIL() << "send on a group of one did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("send to rank 0 on group 'pp'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no peer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c->recv(&x, 1, 0), Error);
}

TEST(CommunicatorTimeout, DefaultsToFiveMinutes) {
  ScopedEnv env("WEFT_COMM_TIMEOUT", nullptr);
  EXPECT_EQ(make_local_communicator()->timeout_seconds(), 300.0);
}

TEST(CommunicatorTimeout, WeftCommTimeoutOverridesIt) {
  ScopedEnv env("WEFT_COMM_TIMEOUT", "2.5");
  auto c = make_local_communicator();
  EXPECT_EQ(c->timeout_seconds(), 2.5);
  c->set_timeout_seconds(0.5);
  EXPECT_EQ(c->timeout_seconds(), 0.5);
}

TEST(CommunicatorTimeout, ABadWeftCommTimeoutIsAnErrorNamingIt) {
  for (const char* bad : {"abc", "-1", "0", "5s", "nan"}) {
    ScopedEnv env("WEFT_COMM_TIMEOUT", bad);
    try {
      make_local_communicator();
      ADD_FAILURE() << "WEFT_COMM_TIMEOUT=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("WEFT_COMM_TIMEOUT='") + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace weft::comm
