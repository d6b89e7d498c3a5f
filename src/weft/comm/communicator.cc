#include "weft/comm/communicator.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

#include "weft/core/check.h"
#include "weft/core/clock.h"

namespace weft::comm {

namespace {

// Indexed by DataType and ReduceOp.
struct DataTypeInfo {
  size_t size;
  std::string_view name;
};
constexpr DataTypeInfo kDataTypes[] = {{4, "f32"}, {8, "f64"}, {4, "i32"},
                                       {8, "i64"}, {1, "u8"},  {2, "bf16"}};
constexpr std::string_view kReduceOpNames[] = {"sum", "max"};

const DataTypeInfo& info(DataType t) {
  const auto i = static_cast<size_t>(t);
  if (i >= std::size(kDataTypes)) WEFT_FAIL("unknown DataType ", static_cast<int>(t));
  return kDataTypes[i];
}

}  // namespace

size_t dtype_size(DataType t) { return info(t).size; }
std::string_view dtype_name(DataType t) { return info(t).name; }

void check_reducible(std::string_view where, DataType t) {
  if (t == DataType::U8) {
    throw Error(fmt::format("{}: {} cannot be reduced (f32, f64, i32, i64 and bf16 can)", where,
                            dtype_name(t)));
  }
}

namespace {
template <typename T>
void reduce_as(T* dst, const T* a, const T* b, int64_t n, ReduceOp op) {
  if (op == ReduceOp::Sum) {
    for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = a[i] < b[i] ? b[i] : a[i];
  }
}

// Each pairwise result in fp32, rounded once to bf16 (NCCL's bf16 arithmetic). A max is one of its
// operands: it is chosen, not rounded.
void reduce_bf16(BF16* dst, const BF16* a, const BF16* b, int64_t n, ReduceOp op) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i].to_float(), y = b[i].to_float();
    if (op == ReduceOp::Sum) {
      dst[i] = BF16::from_float(x + y);
    } else {
      dst[i] = x < y ? b[i] : a[i];
    }
  }
}
}  // namespace

void reduce_into(void* dst, const void* a, const void* b, int64_t n, DataType t, ReduceOp op) {
  const auto as = [&]<typename T>(T* out) {
    return reduce_as(out, static_cast<const T*>(a), static_cast<const T*>(b), n, op);
  };
  switch (t) {
    case DataType::F32:
      return as(static_cast<float*>(dst));
    case DataType::F64:
      return as(static_cast<double*>(dst));
    case DataType::I32:
      return as(static_cast<int32_t*>(dst));
    case DataType::I64:
      return as(static_cast<int64_t*>(dst));
    case DataType::BF16:
      return reduce_bf16(static_cast<BF16*>(dst), static_cast<const BF16*>(a),
                         static_cast<const BF16*>(b), n, op);
    case DataType::U8:
      break;
  }
  WEFT_FAIL("cannot reduce ", dtype_name(t));
}

std::string_view reduce_op_name(ReduceOp op) {
  const auto i = static_cast<size_t>(op);
  if (i >= std::size(kReduceOpNames)) WEFT_FAIL("unknown ReduceOp ", static_cast<int>(op));
  return kReduceOpNames[i];
}

namespace {

std::atomic<int64_t> g_current_step{0};
std::atomic<int64_t> g_waiting_ns{0};
thread_local int t_wait_depth = 0;  // a wrapper's wait calls its inner one's: count the outer
RollCall g_roll_call;               // set once, before any wait (MpiSession)

}  // namespace

void set_roll_call(RollCall r) { g_roll_call = std::move(r); }
bool roll_call_heard() { return g_roll_call.called && g_roll_call.called(); }
std::string call_the_roll(double timeout_s) {
  return g_roll_call.call ? g_roll_call.call(timeout_s) : std::string();
}

void set_current_step(int64_t step) { g_current_step.store(step, std::memory_order_relaxed); }
int64_t current_step() { return g_current_step.load(std::memory_order_relaxed); }

double waiting_seconds() { return static_cast<double>(g_waiting_ns.load()) * 1e-9; }

void timed_wait(const std::function<void()>& wait) {
  if (t_wait_depth > 0) {
    wait();
    return;
  }
  // Counted when the wait returns or throws.
  struct Timed {
    SteadyClock::time_point t0 = SteadyClock::now();
    Timed() { ++t_wait_depth; }
    ~Timed() {
      --t_wait_depth;
      g_waiting_ns +=
          std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - t0).count();
    }
  } timed;
  wait();
}

namespace {

constexpr double kDefaultTimeoutSeconds = 300.0;

// WEFT_COMM_TIMEOUT=<seconds> (> 0); a value that is not one is an error, not silently ignored.
double timeout_from_env() {
  const char* env = std::getenv("WEFT_COMM_TIMEOUT");
  if (env == nullptr || *env == '\0') return kDefaultTimeoutSeconds;
  char* end = nullptr;
  errno = 0;
  const double s = std::strtod(env, &end);
  if (errno != 0 || end == env || *end != '\0' || !std::isfinite(s) || s <= 0) {
    throw Error(fmt::format("WEFT_COMM_TIMEOUT='{}' is not a number of seconds > 0", env));
  }
  return s;
}

// Size 1: every collective's result is this rank's own input.
class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(std::string name, std::optional<double> timeout_s = {})
      : Communicator(std::move(name), 0, 1, timeout_s) {}

  Work all_reduce_async(void* data, int64_t n, DataType t, ReduceOp op) override {
    check_count("all_reduce", n);
    // As every other backend, although one rank has nothing to add: code that reduces bytes on a
    // group of one would fail only once it runs on two.
    check_reducible(where("all_reduce"), t);
    return {};
  }
  Work reduce_scatter_async(void* out, const void* in, int64_t n, DataType t) override {
    check_count("reduce_scatter", n);
    check_reducible(where("reduce_scatter"), t);
    copy(out, in, n, t);
    return {};
  }
  Work all_gather_async(void* out, const void* in, int64_t n, DataType t) override {
    check_count("all_gather", n);
    copy(out, in, n, t);
    return {};
  }
  Work broadcast_async(void* data, int64_t n, DataType t, int root) override {
    check_count("broadcast", n);
    WEFT_CHECK(root == 0, "broadcast on group '", name(), "' (size 1) from root ", root);
    return {};
  }
  Work send_async(const void* data, int64_t n, DataType t, int peer, int tag) override {
    throw Error(
        fmt::format("send to rank {} on group '{}': a group of size 1 has no peer", peer, name()));
  }
  Work recv_async(void* data, int64_t n, DataType t, int peer, int tag) override {
    throw Error(fmt::format("recv from rank {} on group '{}': a group of size 1 has no peer", peer,
                            name()));
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    WEFT_CHECK(color >= 0, "split of group '", this->name(), "': color ", color, " must be >= 0");
    return std::make_unique<LocalCommunicator>(name, timeout_seconds());
  }

 private:
  void check_count(const char* op, int64_t n) const {
    WEFT_CHECK(n >= 0, op, " on group '", name(), "': negative count ", n);
  }
  std::string where(const char* op) const { return fmt::format("{} on group '{}'", op, name()); }
  static void copy(void* out, const void* in, int64_t n, DataType t) {
    if (out != in && n > 0) std::memmove(out, in, static_cast<size_t>(n) * dtype_size(t));
  }
};

}  // namespace

Communicator::Communicator(std::string name, int rank, int size, std::optional<double> timeout_s)
    : name_(std::move(name)),
      rank_(rank),
      size_(size),
      timeout_s_(timeout_s ? *timeout_s : timeout_from_env()) {}

std::unique_ptr<Communicator> make_local_communicator(const std::string& name) {
  return std::make_unique<LocalCommunicator>(name);
}

std::vector<std::string> all_gather_strings(Communicator* world, const std::string& mine) {
  if (world == nullptr || world->size() == 1) return {mine};
  const int n = world->size();
  const int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(static_cast<size_t>(n));
  world->all_gather(lens.data(), &len, 1);
  const int64_t width = *std::max_element(lens.begin(), lens.end());
  std::vector<uint8_t> padded(static_cast<size_t>(width)), all(static_cast<size_t>(width * n));
  std::copy(mine.begin(), mine.end(), padded.begin());
  world->all_gather(all.data(), padded.data(), width);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r) {
    const char* p = reinterpret_cast<const char*>(all.data()) + r * width;
    out.emplace_back(p, static_cast<size_t>(lens[static_cast<size_t>(r)]));
  }
  return out;
}

std::vector<double> all_gather_values(Communicator* group, std::span<const double> mine) {
  if (group == nullptr || group->size() == 1) return {mine.begin(), mine.end()};
  std::vector<double> all(mine.size() * static_cast<size_t>(group->size()));
  group->all_gather(all.data(), mine.data(), static_cast<int64_t>(mine.size()));
  return all;
}

}  // namespace weft::comm
