#include "support/ordering_checker.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "weft/comm/recording_communicator.h"
#include "weft/core/check.h"

namespace weft::comm {
namespace {

// The violations of one checker family (a checker and its splits, on one rank): a dropped Work is
// found in a destructor on any of them, and must fail the family's next call.
class Violations {
 public:
  void add(std::string message) noexcept {
    try {
      std::lock_guard lock(mu_);
      if (count_ < kKept) messages_.push_back(std::move(message));
      ++count_;
    } catch (...) {
      // Out of memory in a destructor: nothing better to do than lose the message.
    }
  }
  void throw_if_any() const {
    std::lock_guard lock(mu_);
    if (count_ == 0) return;
    if (count_ == 1) throw Error(messages_.front());
    // A loop that drops every Work records thousands; the first few say what went wrong.
    std::string more = count_ > kKept ? fmt::format("; and {} more", count_ - kKept) : "";
    throw Error(
        fmt::format("{} ordering violations: {}{}", count_, fmt::join(messages_, "; "), more));
  }

 private:
  static constexpr int64_t kKept = 8;
  mutable std::mutex mu_;
  std::vector<std::string> messages_;
  int64_t count_ = 0;
};

// A caller's buffer: where it is and how many bytes (empty: the op has no such buffer). Const
// because inputs are; an output came from the caller's non-const pointer, so writing it is fine.
struct Region {
  const std::byte* data = nullptr;
  size_t bytes = 0;
};

constexpr unsigned char kPoison = 0xFF;

// One op in flight, shared by its Work's closures: the caller's buffers, the private copies the
// wrapped op works on, and the wrapped op's Work.
class Pending {
 public:
  Pending(std::string what, std::shared_ptr<Violations> violations, Region in, Region out)
      : what_(std::move(what)),
        violations_(std::move(violations)),
        in_(in),
        out_(out),
        in_place_(in.data == out.data && in.bytes == out.bytes),
        // Snapshots before the poison: the in-place forms have their input inside the output.
        // Never empty, so the wrapped op is never given a null buffer.
        private_in_(snapshot(in_place_ ? Region{} : in)),
        private_out_(snapshot(out)) {}
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;

  ~Pending() {
    // During unwinding the caller cannot finish its Works, and its run is failing already.
    if (!finished_ && std::uncaught_exceptions() == 0) {
      violations_->add(what_ + " was dropped before wait() or order()");
    }
  }

  // Starts the wrapped op on the private buffers (the in-place ops on the one private output),
  // then poisons the caller's output: the op never touches the caller's buffers, and one that
  // fails to start leaves them as they were.
  void start(const std::function<Work(const void* in, void* out)>& issue) {
    finished_ = true;  // an op that did not start has nothing to finish
    inner_ = issue(in_place_ ? private_out_.data() : private_in_.data(), private_out_.data());
    finished_ = false;
    if (out_.bytes > 0) std::memset(writable(out_), kPoison, out_.bytes);
  }

  bool test() { return inner_.test(); }

  // wait() and order(): the result must reach the caller's output now, on the host, so both wait.
  void finish() {
    if (finished_) return;  // a copy of the Work finished it already
    finished_ = true;
    inner_.wait();
    violations_->throw_if_any();
    if (!input_unchanged()) fail("its input was written before the Work was waited or ordered");
    if (!std::all_of(out_.data, out_.data + out_.bytes,
                     [](std::byte b) { return std::to_integer<unsigned char>(b) == kPoison; })) {
      fail("its output was written before the Work was waited or ordered");
    }
    if (out_.bytes > 0) std::memcpy(writable(out_), private_out_.data(), out_.bytes);
  }

 private:
  static std::vector<std::byte> snapshot(Region r) {
    std::vector<std::byte> copy(std::max<size_t>(r.bytes, 1));
    if (r.bytes > 0) std::memcpy(copy.data(), r.data, r.bytes);
    return copy;
  }
  static void* writable(Region r) { return const_cast<std::byte*>(r.data); }

  [[noreturn]] void fail(const std::string& why) {
    std::string message = fmt::format("{}: {}", what_, why);
    violations_->add(message);
    throw Error(message);
  }

  // The input bytes outside the output range (which holds the poison instead) against the
  // snapshot: the output range is contiguous, so at most one part before it and one after.
  bool input_unchanged() const {
    if (in_place_ || in_.bytes == 0) return true;
    size_t lo = in_.bytes, hi = in_.bytes;  // [lo, hi): the part of the input that is output
    if (out_.bytes > 0) {
      const auto in = reinterpret_cast<uintptr_t>(in_.data);
      const auto offset = [&](uintptr_t p) {
        return static_cast<size_t>(std::clamp(p, in, in + in_.bytes) - in);
      };
      const auto out = reinterpret_cast<uintptr_t>(out_.data);
      lo = offset(out);
      hi = offset(out + out_.bytes);
    }
    return std::memcmp(in_.data, private_in_.data(), lo) == 0 &&
           std::memcmp(in_.data + hi, private_in_.data() + hi, in_.bytes - hi) == 0;
  }

  std::string what_;  // "all_reduce on group 'tp' (rank 0 of 2)"
  std::shared_ptr<Violations> violations_;
  Region in_;                          // the caller's input (empty for recv)
  Region out_;                         // the caller's output (empty for send)
  bool in_place_;                      // all_reduce, broadcast: the input is the output
  std::vector<std::byte> private_in_;  // the input's snapshot, which the wrapped op reads
  std::vector<std::byte> private_out_;
  // After the buffers, so it is destroyed first: a backend that waits or cancels a dropped op in
  // its Work's destructor does so while the op's buffers still exist.
  Work inner_;
  bool finished_ = false;
};

const Communicator& wrapped(const std::unique_ptr<Communicator>& inner) {
  WEFT_CHECK(inner != nullptr, "make_ordering_checker needs a communicator to wrap");
  return *inner;
}

class OrderingChecker : public Communicator {
 public:
  // The waits happen in the inner communicator: the base is a copy of it.
  OrderingChecker(std::unique_ptr<Communicator> inner, std::shared_ptr<Violations> violations)
      : Communicator(wrapped(inner)),
        inner_(std::move(inner)),
        violations_(std::move(violations)) {}
  const Violations& violations() const { return *violations_; }

  Work all_reduce_async(void* data, int64_t n, DataType t, ReduceOp op) override {
    const Region buf = region(data, n, t);
    return issue(CommOp::AllReduce, buf, buf,
                 [&](const void*, void* out) { return inner_->all_reduce_async(out, n, t, op); });
  }
  Work reduce_scatter_async(void* out, const void* in, int64_t n, DataType t) override {
    return issue(
        CommOp::ReduceScatter, region(in, n * size(), t), region(out, n, t),
        [&](const void* pin, void* pout) { return inner_->reduce_scatter_async(pout, pin, n, t); });
  }
  Work all_gather_async(void* out, const void* in, int64_t n, DataType t) override {
    return issue(
        CommOp::AllGather, region(in, n, t), region(out, n * size(), t),
        [&](const void* pin, void* pout) { return inner_->all_gather_async(pout, pin, n, t); });
  }
  Work broadcast_async(void* data, int64_t n, DataType t, int root) override {
    const Region buf = region(data, n, t);
    return issue(CommOp::Broadcast, buf, buf,
                 [&](const void*, void* out) { return inner_->broadcast_async(out, n, t, root); });
  }
  Work send_async(const void* data, int64_t n, DataType t, int peer, int tag) override {
    return issue(CommOp::Send, region(data, n, t), Region{},
                 [&](const void* pin, void*) { return inner_->send_async(pin, n, t, peer, tag); });
  }
  Work recv_async(void* data, int64_t n, DataType t, int peer, int tag) override {
    return issue(CommOp::Recv, Region{}, region(data, n, t), [&](const void*, void* pout) {
      return inner_->recv_async(pout, n, t, peer, tag);
    });
  }
  void barrier() override {
    violations_->throw_if_any();
    inner_->set_timeout_seconds(timeout_seconds());
    inner_->barrier();
  }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    violations_->throw_if_any();
    inner_->set_timeout_seconds(timeout_seconds());  // the new group inherits this one's timeout
    return std::make_unique<OrderingChecker>(inner_->split(color, key, name), violations_);
  }

 private:
  static Region region(const void* data, int64_t n, DataType t) {
    // A negative count is the wrapped op's error to report; it sees the private buffer's count.
    const size_t bytes = n > 0 ? static_cast<size_t>(n) * dtype_size(t) : 0;
    return Region{static_cast<const std::byte*>(data), bytes};
  }

  Work issue(CommOp op, Region in, Region out,
             const std::function<Work(const void* in, void* out)>& start) {
    violations_->throw_if_any();
    // The waits happen in the inner communicator: it waits as long as this one was told to.
    inner_->set_timeout_seconds(timeout_seconds());
    auto p = std::make_shared<Pending>(
        fmt::format("{} on group '{}' (rank {} of {})", comm_op_name(op), name(), rank(), size()),
        violations_, in, out);
    p->start(start);
    // No order function: order() needs the result on the host here, so it is wait().
    return Work([p] { p->finish(); }, [p] { return p->test(); });
  }

  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<Violations> violations_;
};

}  // namespace

std::unique_ptr<Communicator> make_ordering_checker(std::unique_ptr<Communicator> inner) {
  return std::make_unique<OrderingChecker>(std::move(inner), std::make_shared<Violations>());
}

void check_ordering(const Communicator& checker) {
  const auto* c = dynamic_cast<const OrderingChecker*>(&checker);
  WEFT_CHECK(c != nullptr, "check_ordering: group '", checker.name(),
             "' is not an ordering checker (make_ordering_checker)");
  c->violations().throw_if_any();
}

}  // namespace weft::comm
