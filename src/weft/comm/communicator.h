#pragma once
// The Communicator (DESIGN.md §4): a small, c10d-shaped set of collectives and point-to-point
// messages over one group of ranks. Layers are given the communicator they use (never a global
// group). Backends: LocalCommunicator (size 1), MpiCommunicator (host buffers over Open MPI;
// comm/mpi_communicator.h, a separate library so only the runtime links MPI), and
// RecordingCommunicator (wraps another one and records op, bytes and group, so tests can assert
// the communication volume the PTD-P analysis predicts). The tests add their own: ranks that are
// threads of one process, for machines without MPI, and the ordering checker
// (tests/support/thread_communicator.h, ordering_checker.h).
//
// Buffers are host memory of one DataType, or a backend's memory for the communicators of a
// device (comm/cuda); counts are elements. A communicator on a backend's memory starts each
// operation after the backend work queued before the call (so no caller synchronizes the backend
// first), and Work::order() queues the backend work after it behind the operation. Every blocking
// call waits at most timeout_seconds() and then throws weft::Error naming the op and group, so no
// rank hangs forever on a peer that died.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "weft/core/dtype.h"

namespace weft::comm {

// The training step this process is in (1 for the first, 0 outside training), set by the step
// loop: a wait that gives up names it (comm/mpi_communicator.cc, "Who did not arrive").
void set_current_step(int64_t step);
int64_t current_step();

// The job's roll call (comm/mpi_communicator.cc, "Who did not arrive") for a wait that runs
// outside MPI (NCCL's, comm/cuda): `called()`, whether another rank timed out and called the roll
// (the wait then gives up too, and answers); `call(timeout_s)`, after this rank's own timeout,
// holds it and returns what to append to the message ("; world rank 3 on node7 did not answer
// the roll call within 2 s ..."). MpiSession installs it when its roll call is on; otherwise
// called() is false and call() returns "".
struct RollCall {
  std::function<bool()> called;
  std::function<std::string(double timeout_s)> call;
};
void set_roll_call(RollCall r);
bool roll_call_heard();
std::string call_the_roll(double timeout_s);

// Seconds this process has spent blocked in Work::wait() and Work::order() (the outermost one
// where a communicator wraps another): the exposed communication the trainer reports per rank.
double waiting_seconds();
// Runs `wait` (a Work's), adding the time it blocks to waiting_seconds().
void timed_wait(const std::function<void()>& wait);

// BF16 elements are weft::BF16 (core/dtype.h); U8 is moved but not reduced.
//
// bf16 is reduced in bf16, as Megatron-LM and NCCL sum tensor-parallel activations: each pairwise
// op is computed in fp32 and rounded once to bf16 (reduce_into), so a sum over ranks depends on
// the order in which a backend adds them. Every backend must still give every rank the same bits,
// since the ranks of a tensor group go on with replicated activations that would otherwise drift
// apart: the thread backend folds in rank order and copies the result to every rank, the MPI
// backend reduces each block on one rank of a ring and passes it on, and NCCL's ring and tree
// algorithms likewise reduce each element once and broadcast it.
enum class DataType { F32, F64, I32, I64, U8, BF16 };
size_t dtype_size(DataType t);

// How n elements of `element_bytes` each go to a communicator: 4-byte ones (fp32) as F32 elements,
// 2-byte ones (bf16 activations and weights) as BF16 elements, so the tensor group sums them
// without a widened copy and a Recording counts the elements the planner counts; any other size as
// bytes (U8).
struct Payload {
  int64_t count = 0;
  DataType type = DataType::F32;
};
inline Payload payload_of(int64_t n, int64_t element_bytes) {
  if (element_bytes == 4) return {n, DataType::F32};
  if (element_bytes == 2) return {n, DataType::BF16};
  return {n * element_bytes, DataType::U8};
}
std::string_view dtype_name(DataType t);

enum class ReduceOp { Sum, Max };
std::string_view reduce_op_name(ReduceOp op);
// Throws weft::Error "<where>: u8 cannot be reduced (...)" for a type no backend reduces (U8).
void check_reducible(std::string_view where, DataType t);
// dst[i] = a[i] op b[i] for n elements of a reducible type (not U8); dst may be a: the arithmetic
// of every host-memory reduction (the thread communicator's collectives, the MPI rings). BF16: the
// op in fp32, rounded once to nearest even, as NCCL's bf16 reductions (so not associative: see
// above). One pass over the three buffers, where a copy and then an add would be two.
void reduce_into(void* dst, const void* a, const void* b, int64_t n, DataType t, ReduceOp op);
// dst[i] = dst[i] op src[i].
inline void reduce_into(void* dst, const void* src, int64_t n, DataType t, ReduceOp op) {
  reduce_into(dst, dst, src, n, t, op);
}

// The DataType of the element type T.
template <typename T>
constexpr DataType data_type_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                    std::is_same_v<T, uint8_t> || std::is_same_v<T, BF16>,
                "no DataType for this element type");
  if constexpr (std::is_same_v<T, float>) return DataType::F32;
  if constexpr (std::is_same_v<T, double>) return DataType::F64;
  if constexpr (std::is_same_v<T, int32_t>) return DataType::I32;
  if constexpr (std::is_same_v<T, int64_t>) return DataType::I64;
  if constexpr (std::is_same_v<T, uint8_t>) return DataType::U8;
  return DataType::BF16;
}

// A handle on an asynchronous operation. Two ways to finish it:
//   wait()  the host blocks until the operation is complete (its buffers may then be reused by the
//           host or by anything else), and throws weft::Error on failure or timeout;
//   order() the backend work the caller queues after this call runs after the operation, without
//           blocking the host where the communicator can order device work by itself (NCCL: the
//           compute stream waits for the operation's CUDA event, cudaStreamWaitEvent); elsewhere
//           (host memory, the staged communicator) it is wait(). The operation's buffers then
//           belong to the backend's later ops; the host must not touch them before a wait of the
//           backend (download, synchronize) or of the communicator. Failures of an ordered
//           operation surface at the communicator's next wait (comm/cuda/nccl_communicator.h).
// The runtime orders what only kernels consume (a pipeline's received activations, the tensor
// group's sums, ZeRO's shards) and waits only where the host needs the result (docs/cuda.md,
// "Streams and events"). A default Work is already complete. A Work must be waited or ordered
// before its buffers are reused: the tests' ordering checker (tests/support/ordering_checker.h)
// fails a run that does not.
class Work {
 public:
  Work() = default;
  // wait_fn is called once by the first wait() (or order(), without order_fn); it must block
  // until completion or throw. test_fn, when given, says without blocking whether the operation is
  // complete. order_fn, when given, is called once by the first order() instead of wait_fn.
  explicit Work(std::function<void()> wait_fn, std::function<bool()> test_fn = {},
                std::function<void()> order_fn = {})
      : wait_(std::move(wait_fn)), test_(std::move(test_fn)), order_(std::move(order_fn)) {}
  void wait() { finish(wait_); }
  void order() { finish(order_ ? order_ : wait_); }
  // Whether the operation is known to be complete, without blocking (false when the backend
  // cannot tell). Calling it also lets the backend progress: Open MPI advances a nonblocking
  // collective only inside MPI calls, so a caller overlapping one with computation polls it now
  // and then. wait() or order() is still needed to finish it.
  bool test() {
    if (!wait_) return true;
    return test_ ? test_() : false;
  }
  bool pending() const { return static_cast<bool>(wait_); }

 private:
  void finish(std::function<void()>& which) {
    if (!wait_) return;
    auto f = std::move(which);
    wait_ = nullptr;
    test_ = nullptr;
    order_ = nullptr;
    timed_wait(f);
  }

  std::function<void()> wait_;
  std::function<bool()> test_;
  std::function<void()> order_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The group's name in messages and recordings ("world", "tp", "dp", "pp", ...).
  const std::string& name() const { return name_; }

  // ---- the backend's primitives (untyped; the typed wrappers below are what callers use) ----
  // In place: data[n] = op over ranks of data[n].
  virtual Work all_reduce_async(void* data, int64_t n, DataType t, ReduceOp op) = 0;
  // in[size*n] on every rank; out[n] on rank r = sum over ranks of in[r*n, (r+1)*n).
  virtual Work reduce_scatter_async(void* out, const void* in, int64_t n, DataType t) = 0;
  // in[n] on every rank; out[size*n] = the ranks' inputs concatenated in rank order.
  virtual Work all_gather_async(void* out, const void* in, int64_t n, DataType t) = 0;
  virtual Work broadcast_async(void* data, int64_t n, DataType t, int root) = 0;
  virtual Work send_async(const void* data, int64_t n, DataType t, int peer, int tag) = 0;
  virtual Work recv_async(void* data, int64_t n, DataType t, int peer, int tag) = 0;
  virtual void barrier() = 0;
  // Blocks until every operation this communicator's Works ordered (Work::order) is complete, or
  // throws weft::Error after timeout_seconds(): the host's bound on device-side waits, so that a
  // peer that died surfaces as an error rather than a stream that waits forever. The runtime calls
  // it once per step, before the host reads the step's results. Communicators whose order() waits
  // on the host have nothing to do.
  virtual void wait_ordered() {}
  // Collective over this group: ranks with equal `color` form a new group, ordered by `key`
  // (then by rank here), named `name`.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  // Seconds a blocking wait may take before it throws (default 300; WEFT_COMM_TIMEOUT overrides).
  double timeout_seconds() const { return timeout_s_; }
  void set_timeout_seconds(double s) { timeout_s_ = s; }

  // ---- typed, blocking wrappers ----
  template <typename T>
  void all_reduce(T* data, int64_t n, ReduceOp op = ReduceOp::Sum) {
    all_reduce_async(data, n, data_type_of<T>(), op).wait();
  }
  template <typename T>
  void reduce_scatter(T* out, const T* in, int64_t n) {
    reduce_scatter_async(out, in, n, data_type_of<T>()).wait();
  }
  template <typename T>
  void all_gather(T* out, const T* in, int64_t n) {
    all_gather_async(out, in, n, data_type_of<T>()).wait();
  }
  template <typename T>
  void broadcast(T* data, int64_t n, int root) {
    broadcast_async(data, n, data_type_of<T>(), root).wait();
  }
  template <typename T>
  void send(const T* data, int64_t n, int peer, int tag = 0) {
    send_async(data, n, data_type_of<T>(), peer, tag).wait();
  }
  template <typename T>
  void recv(T* data, int64_t n, int peer, int tag = 0) {
    recv_async(data, n, data_type_of<T>(), peer, tag).wait();
  }

 protected:
  // A group's rank and size never change. The timeout starts as `timeout_s` (a wrapper's: its inner
  // communicator's; a split's: its parent's), else WEFT_COMM_TIMEOUT or 300.
  Communicator(std::string name, int rank, int size, std::optional<double> timeout_s = {});
  // A wrapper's: a copy of the communicator it wraps (its group, and its timeout to start from).
  Communicator(const Communicator&) = default;

 private:
  std::string name_;
  int rank_, size_;
  double timeout_s_;
};

// Size 1: collectives copy or do nothing; send/recv to oneself are an error.
std::unique_ptr<Communicator> make_local_communicator(const std::string& name = "world");

// Every rank's string, in rank order, on every rank (one process, or no group: just its own).
// Collective: two all-gathers (the lengths, then the strings padded to the longest).
std::vector<std::string> all_gather_strings(Communicator* group, const std::string& mine);

// Every rank's `mine` (the same count on each), concatenated in rank order, on every rank (one
// process, or no group: just its own). Collective.
std::vector<double> all_gather_values(Communicator* group, std::span<const double> mine);

}  // namespace weft::comm
