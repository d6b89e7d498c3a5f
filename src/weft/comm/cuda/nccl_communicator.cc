// The NCCL communicator (nccl_communicator.h). Host code only.
//
// Sources: NCCL 2.28 nccl.h and its user guide ("Communicator creation and management",
// "Fault tolerance": a nonblocking communicator returns ncclInProgress from a call whose work goes
// on in the background, and ncclCommGetAsyncError reports its state until it is ncclSuccess or
// an error; ncclCommAbort ends a communicator whose peers may be gone), and the CUDA runtime API
// (events: cudaEventQuery returns cudaErrorNotReady until the work before the event is done).

#include "weft/comm/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "weft/comm/poll.h"
#include "weft/core/check.h"
#include "weft/kernels/cuda/arena.h"
#include "weft/kernels/cuda/cuda_check.h"

#ifdef WEFT_HAVE_NCCL
#include <nccl.h>
#endif

namespace weft::comm::cuda {

#ifndef WEFT_HAVE_NCCL

bool have_nccl() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     const std::string& name,
                                                     CUstream_st* compute) {
  (void)compute;
  throw Error(fmt::format(
      "NCCL communicator '{}' on device {}: weft was built without NCCL (cmake/WeftCuda.cmake did "
      "not find nccl.h and libnccl); use the staged communicator (make_staged_communicator)",
      name, device));
}

#else

namespace detail {

// What WEFT_NCCL_CHECK calls. ncclInProgress is not an error: a nonblocking communicator returns
// it while the call's work goes on in the background (the caller then waits for it: settle()).
ncclResult_t nccl_check(ncclResult_t rc, const char* call, const std::string& where,
                        const char* file, int line) {
  if (rc == ncclSuccess || rc == ncclInProgress) return rc;
  // ncclGetLastError's argument is unused by NCCL 2.28 (the message is per thread).
  const char* last = ncclGetLastError(nullptr);
  throw Error(fmt::format("{}: NCCL error: {}: {}{}{} ({}:{})", where, call, ncclGetErrorString(rc),
                          last != nullptr && *last != '\0' ? ": " : "", last != nullptr ? last : "",
                          file, line));
}

}  // namespace detail

// WEFT_NCCL_CHECK(call, where): every NCCL call goes through it. Evaluates to the call's result;
// throws weft::Error, "<where>: NCCL error: <call>: <ncclGetErrorString>: <ncclGetLastError>
// (file:line)", unless it is ncclSuccess or ncclInProgress.
#define WEFT_NCCL_CHECK(call, where) \
  ::weft::comm::cuda::detail::nccl_check((call), #call, (where), __FILE__, __LINE__)

namespace {

using Stream = kernels::cuda::Stream;

ncclDataType_t nccl_type(DataType t) {
  // Indexed by DataType.
  constexpr ncclDataType_t types[] = {ncclFloat32, ncclFloat64, ncclInt32,
                                      ncclInt64,   ncclUint8,   ncclBfloat16};
  return types[static_cast<size_t>(t)];
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclMax; }

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Makes `device` current for a scope and restores the previous one. The NCCL calls, stream and
// event of a communicator must be issued with its device current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    WEFT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) WEFT_CUDA_CHECK(cudaSetDevice(device));
    changed_ = previous_ != device;
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// Destroys a CUDA handle a unique_ptr owns (the error, if any, ignored).
template <auto destroy>
struct Destroy {
  void operator()(auto* handle) const { (void)destroy(handle); }
};
// A CUDA event for ordering only (no timing: cheaper to record and query).
using Event = std::unique_ptr<CUevent_st, Destroy<cudaEventDestroy> >;
Event make_event() {
  cudaEvent_t event = nullptr;
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return Event(event);
}
// A non-blocking stream the communicator owns.
using OwnedStream = std::unique_ptr<CUstream_st, Destroy<cudaStreamDestroy> >;
OwnedStream make_stream() {
  Stream stream = nullptr;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return OwnedStream(stream);
}

// The NCCL communicator and what messages say about it. Shared by the communicator and the Works
// in flight, so a Work may outlive its communicator; the last owner finalizes NCCL's.
struct Group {
  ncclComm_t comm = nullptr;
  std::string name;
  int rank = 0, size = 1, device = 0;
  double timeout_s = 300;  // the communicator's latest, for the finalization at the end
  std::string aborted;     // why the communicator was aborted; empty while it is usable

  Group() = default;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Ends NCCL's communicator and remembers why, so later operations say so.
  void abort(std::string why) {
    if (comm != nullptr) {
      (void)ncclCommAbort(comm);
      comm = nullptr;
    }
    aborted = std::move(why);
  }

  // Flushes the operations in flight (ncclCommFinalize), waits for the communicator to be
  // quiescent at most timeout_s, then frees it; aborts it instead if that fails or takes longer
  // (a peer gone). Never throws.
  ~Group() {
    if (comm == nullptr) return;
    int previous = -1;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device &&
                          cudaSetDevice(device) == cudaSuccess;
    ncclResult_t state = ncclCommFinalize(comm);
    if (state == ncclInProgress) {
      poll_until(timeout_s, [&] {
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
        return state != ncclInProgress;
      });
    }
    if (state == ncclSuccess) {
      (void)ncclCommDestroy(comm);
    } else {
      (void)ncclCommAbort(comm);
    }
    if (switched) (void)cudaSetDevice(previous);
  }
};

// One operation, for messages: "all_reduce on group 'tp' (rank 0 of 2)" and " (4 f32)".
struct Op {
  const char* what;
  std::shared_ptr<Group> group;
  DataType dtype = DataType::F32;
  int64_t n = 0;
  int peer = -1;  // send/recv only

  std::string where() const {
    return fmt::format("{} on group '{}' (rank {} of {}, device {})", what, group->name,
                       group->rank, group->size, group->device);
  }
  std::string detail() const {
    const std::string_view w = what;
    if (w == "barrier" || w == "split" || w == "init") return "";
    if (peer < 0) return fmt::format(" ({} {})", n, dtype_name(dtype));
    return fmt::format(" ({} {} {} rank {})", n, dtype_name(dtype), w == "send" ? "to" : "from",
                       peer);
  }
  // Throws if the communicator was aborted by an earlier failure.
  void check_usable() const {
    if (!group->aborted.empty()) {
      throw Error(fmt::format("{}: the communicator was aborted after an earlier failure ({})",
                              where(), group->aborted));
    }
  }
};

// Fails `o`: aborts the communicator (its peers may be gone, or its state is unknown) and throws.
// `after`: what follows the op's detail (the roll call's verdict).
[[noreturn]] void fail(const Op& o, const std::string& why, const std::string& after = "") {
  const std::string message = o.where() + " " + why + o.detail() + after;
  o.group->abort(message);
  throw Error(message);
}

// The NCCL state of `comm` as an error message, or "" while it is fine or still working.
std::string async_error(ncclComm_t comm, ncclResult_t* state) {
  const ncclResult_t rc = ncclCommGetAsyncError(comm, state);
  if (rc != ncclSuccess) *state = rc;
  if (*state == ncclSuccess || *state == ncclInProgress) return "";
  const char* last = ncclGetLastError(comm);
  return fmt::format("failed: NCCL error: {}{}{}", ncclGetErrorString(*state),
                     last != nullptr && *last != '\0' ? ": " : "", last != nullptr ? last : "");
}

// A wait that ran out (`finished` false) or heard another rank call the roll (the job's, comm/
// communicator.h: the ranks waiting in MPI and in NCCL alike name the rank that did not arrive).
// Waits of a few milliseconds do not look for the roll call.
class RollCallWatch {
 public:
  bool heard() {
    heard_ = heard_ || (std::chrono::steady_clock::now() - start_ > std::chrono::milliseconds(20) &&
                        roll_call_heard());
    return heard_;
  }
  void fail_unless(const Op& o, bool finished, double timeout_s) const {
    if (heard_) {
      fail(o, "gave up: another rank timed out and called the roll", call_the_roll(timeout_s));
    }
    if (!finished)
      fail(o, fmt::format("timed out after {:g} s", timeout_s), call_the_roll(timeout_s));
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool heard_ = false;
};

// Waits until the background work of a call that returned ncclInProgress on `comm` is done:
// NCCL's rule for a nonblocking communicator before its next call or a use of the stream.
void settle(const Op& o, ncclComm_t comm, double timeout_s) {
  ncclResult_t state = ncclInProgress;
  std::string error;
  RollCallWatch roll;
  const bool done = poll_until(timeout_s, [&] {
    error = async_error(comm, &state);
    return state != ncclInProgress || roll.heard();
  });
  if (!error.empty()) fail(o, error);
  roll.fail_unless(o, done, timeout_s);
}

// Waits for the event recorded after `o`, or fails it after the timeout or on an NCCL error.
void wait_for(const Op& o, const Event& done, double timeout_s) {
  o.check_usable();
  std::string error;
  RollCallWatch roll;
  const bool finished = poll_until(timeout_s, [&] {
    const cudaError_t rc = cudaEventQuery(done.get());
    if (rc == cudaSuccess) return true;
    // cudaErrorNotReady is not a failure, but the runtime may keep it as the last error, which
    // a later WEFT_CUDA_CHECK_LAUNCH (cudaGetLastError) would report: clear it (PyTorch's
    // CUDAEvent::query does the same).
    (void)cudaGetLastError();
    if (rc != cudaErrorNotReady) {
      error = fmt::format("failed: CUDA error: cudaEventQuery: {} ({})", cudaGetErrorString(rc),
                          cudaGetErrorName(rc));
      return true;
    }
    ncclResult_t state = ncclSuccess;
    error = async_error(o.group->comm, &state);
    return !error.empty() || roll.heard();
  });
  if (!error.empty()) fail(o, error);
  roll.fail_unless(o, finished, timeout_s);
}

class NcclCommunicator final : public Communicator {
 public:
  // Operations run on a non-blocking stream of the communicator's own, ordered against `compute`
  // (nullptr: the legacy default stream).
  NcclCommunicator(std::shared_ptr<Group> group, double timeout_s, Stream compute)
      : Communicator(group->name, group->rank, group->size, timeout_s),
        group_(std::move(group)),
        compute_(compute != nullptr ? compute : cudaStreamLegacy) {
    DeviceGuard on(group_->device);
    stream_ = make_stream();
    after_compute_ = make_event();  // on the group's device, as the stream
    WEFT_CUDA_CHECK(cudaMalloc(&barrier_value_, sizeof(int32_t)));
    WEFT_CUDA_CHECK(cudaMemset(barrier_value_, 0, sizeof(int32_t)));
  }
  ~NcclCommunicator() override {
    if (barrier_value_ != nullptr) (void)cudaFree(barrier_value_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  Work all_reduce_async(void* data, int64_t n, DataType t, ReduceOp op) override {
    const Op o = make_op("all_reduce", t, n);
    check_reducible(o.where(), t);
    return enqueue(o, [&](ncclComm_t comm) {
      return WEFT_NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(n), nccl_type(t),
                                           nccl_op(op), comm, stream()),
                             o.where());
    });
  }

  Work reduce_scatter_async(void* out, const void* in, int64_t n, DataType t) override {
    const Op o = make_op("reduce_scatter", t, n);
    check_reducible(o.where(), t);
    check_in_place(o, in, static_cast<size_t>(size()) * n, out, n, "out == in + rank*n");
    return enqueue(o, [&](ncclComm_t comm) {
      return WEFT_NCCL_CHECK(
          ncclReduceScatter(in, out, static_cast<size_t>(n), nccl_type(t), ncclSum, comm, stream()),
          o.where());
    });
  }

  Work all_gather_async(void* out, const void* in, int64_t n, DataType t) override {
    const Op o = make_op("all_gather", t, n);
    check_in_place(o, out, static_cast<size_t>(size()) * n, in, n, "in == out + rank*n");
    return enqueue(o, [&](ncclComm_t comm) {
      return WEFT_NCCL_CHECK(
          ncclAllGather(in, out, static_cast<size_t>(n), nccl_type(t), comm, stream()), o.where());
    });
  }

  Work broadcast_async(void* data, int64_t n, DataType t, int root) override {
    const Op o = make_op("broadcast", t, n);
    if (root < 0 || root >= size())
      throw Error(fmt::format("{}: root {} is not a rank of the group", o.where(), root));
    return enqueue(o, [&](ncclComm_t comm) {
      return WEFT_NCCL_CHECK(
          ncclBroadcast(data, data, static_cast<size_t>(n), nccl_type(t), root, comm, stream()),
          o.where());
    });
  }

  // `tag` is checked (>= 0, as for MPI) and otherwise ignored: NCCL matches by order
  // (nccl_communicator.h).
  Work send_async(const void* data, int64_t n, DataType t, int peer, int tag) override {
    const Op o = make_p2p_op("send", t, n, peer, tag);
    return enqueue(o, [&](ncclComm_t comm) {
      return WEFT_NCCL_CHECK(
          ncclSend(data, static_cast<size_t>(n), nccl_type(t), peer, comm, stream()), o.where());
    });
  }

  Work recv_async(void* data, int64_t n, DataType t, int peer, int tag) override {
    const Op o = make_p2p_op("recv", t, n, peer, tag);
    return enqueue(o, [&](ncclComm_t comm) {
      return WEFT_NCCL_CHECK(
          ncclRecv(data, static_cast<size_t>(n), nccl_type(t), peer, comm, stream()), o.where());
    });
  }

  // An all-reduce of one int on the device: it completes on a rank only once every rank has
  // contributed, i.e. reached the barrier. The wait has the communicator's timeout.
  void barrier() override {
    const Op o = make_op("barrier", DataType::I32, 1);
    enqueue(o, [&](ncclComm_t comm) {
      return WEFT_NCCL_CHECK(
          ncclAllReduce(barrier_value_, barrier_value_, 1, ncclInt32, ncclSum, comm, stream()),
          o.where());
    }).wait();
  }

  void wait_ordered() override {
    DeviceGuard on(group_->device);
    for (const Ordered& d : *ordered_) wait_for(d.op, *d.done, timeout_seconds());
    ordered_->clear();
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    const Op o = make_op("split", DataType::U8, 0);
    o.check_usable();
    group_->timeout_s = timeout_seconds();
    DeviceGuard on(group_->device);
    ncclConfig_t config = nonblocking_config();
    ncclComm_t sub = nullptr;
    const ncclResult_t rc = WEFT_NCCL_CHECK(
        ncclCommSplit(group_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, &config),
        o.where());
    // The split's work runs in the background of the parent (the exchange of colors) and of the
    // child (its initialization); wait for both.
    if (rc == ncclInProgress) {
      try {
        settle(o, group_->comm, timeout_seconds());
      } catch (...) {
        if (sub != nullptr) (void)ncclCommAbort(sub);  // the parent is aborted by settle()
        throw;
      }
    }
    // In nonblocking mode NCCL writes *newcomm from its background job when the child's
    // initialization ends, which can be after the parent reports done: a plain read of `sub` then
    // saw null for a rank that has a color (the H200, NCCL 2.28, 2026-12-04: a group of one came
    // back as "no group"). A rank with a color waits for the handle; one without gets none.
    if (color >= 0) {
      const bool written = poll_until(
          timeout_seconds(), [&] { return __atomic_load_n(&sub, __ATOMIC_ACQUIRE) != nullptr; });
      if (!written) fail(o, fmt::format("no communicator after {:g} s", timeout_seconds()));
    }
    if (sub == nullptr) return nullptr;
    auto g = std::make_shared<Group>();
    g->comm = sub;
    g->name = name;
    g->device = group_->device;
    g->timeout_s = timeout_seconds();
    const Op child{.what = "split", .group = g};
    settle(child, sub, timeout_seconds());
    WEFT_NCCL_CHECK(ncclCommUserRank(sub, &g->rank), child.where());
    WEFT_NCCL_CHECK(ncclCommCount(sub, &g->size), child.where());
    // Each group gets a stream of its own, so tp and dp operations may overlap.
    return std::make_unique<NcclCommunicator>(std::move(g), timeout_seconds(), compute_);
  }

 private:
  Op make_op(const char* what, DataType t, int64_t n) const {
    Op o{.what = what, .group = group_, .dtype = t, .n = n};
    if (n < 0) throw Error(fmt::format("{}: negative count {}", o.where(), n));
    return o;
  }
  Op make_p2p_op(const char* what, DataType t, int64_t n, int peer, int tag) const {
    Op o = make_op(what, t, n);
    if (peer < 0 || peer >= size()) {
      throw Error(fmt::format("{}: peer {} is not a rank of the group", o.where(), peer));
    }
    if (peer == rank()) {
      throw Error(
          fmt::format("{}: peer {} is this rank (NCCL needs a message to oneself grouped "
                      "with its receive)",
                      o.where(), peer));
    }
    if (tag < 0) throw Error(fmt::format("{}: tag {} must be >= 0", o.where(), tag));
    o.peer = peer;
    return o;
  }
  // `small` (n elements) may lie inside `big` (size*n elements) only at this rank's block
  // (NCCL's in-place form); any other overlap is an error.
  void check_in_place(const Op& o, const void* big, size_t big_n, const void* small,
                      int64_t small_n, const char* form) const {
    const size_t es = dtype_size(o.dtype);
    const auto b = reinterpret_cast<uintptr_t>(big), s = reinterpret_cast<uintptr_t>(small);
    const uintptr_t b_end = b + big_n * es, s_end = s + static_cast<size_t>(small_n) * es;
    if (small_n == 0 || s >= b_end || b >= s_end) return;
    if (s == b + static_cast<size_t>(rank()) * static_cast<size_t>(small_n) * es) return;
    throw Error(fmt::format("{}: the input and output overlap; in place, NCCL needs {}{}",
                            o.where(), form, o.detail()));
  }

  // Enqueues the call on the stream, after the compute stream's work, and returns the Work that
  // waits for it.
  template <typename Call>
  Work enqueue(const Op& o, Call&& call) {
    o.check_usable();
    const double timeout_s = timeout_seconds();
    group_->timeout_s = timeout_s;
    DeviceGuard on(group_->device);
    WEFT_CUDA_CHECK(cudaEventRecord(after_compute_.get(), compute_));
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream(), after_compute_.get(), 0));
    if (call(group_->comm) == ncclInProgress) settle(o, group_->comm, timeout_s);
    auto done = std::make_shared<Event>(make_event());
    WEFT_CUDA_CHECK(cudaEventRecord(done->get(), stream()));
    // order(): the compute stream (the backend's kernels) waits for the event, the host does not;
    // wait_ordered() bounds the wait later.
    return Work([o, done, timeout_s] { wait_for(o, *done, timeout_s); },
                [done] { return query(*done); },
                [o, done, compute = compute_, ordered = ordered_] {
                  o.check_usable();
                  DeviceGuard on(o.group->device);
                  WEFT_CUDA_CHECK(cudaStreamWaitEvent(compute, done->get(), 0));
                  std::erase_if(*ordered, [](const Ordered& d) { return query(*d.done); });
                  ordered->push_back({o, done});
                });
  }

  // Whether the operation behind `done` is complete (without blocking).
  static bool query(const Event& done) {
    const cudaError_t rc = cudaEventQuery(done.get());
    if (rc != cudaSuccess) (void)cudaGetLastError();  // see wait_for
    return rc == cudaSuccess;
  }

  // An operation a Work ordered and no host wait has seen complete yet.
  struct Ordered {
    Op op;
    std::shared_ptr<Event> done;
  };

  Stream stream() const { return stream_.get(); }

  std::shared_ptr<Group> group_;
  // The stream whose work the operations follow and which order() makes wait: the caller's
  // kernels' (Backend::cuda_stream), else the legacy default stream.
  Stream compute_;
  OwnedStream stream_;
  Event after_compute_;  // orders the stream after compute_
  void* barrier_value_ = nullptr;
  // Shared with the Works' order(), which may outlive the communicator.
  std::shared_ptr<std::vector<Ordered> > ordered_ = std::make_shared<std::vector<Ordered> >();
};

}  // namespace

bool have_nccl() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     const std::string& name,
                                                     CUstream_st* compute) {
  auto g = std::make_shared<Group>();
  g->name = name;
  g->rank = bootstrap.rank();
  g->size = bootstrap.size();
  g->device = device;
  g->timeout_s = bootstrap.timeout_seconds();
  const Op o{.what = "init", .group = g};
  const int devices = kernels::cuda::device_count();
  if (device < 0 || device >= devices) {
    throw Error(fmt::format("{}: device {} is not one of this process's {} CUDA devices", o.where(),
                            device, devices));
  }
  // Rank 0's unique id reaches every rank over the host communicator, whose broadcast has its
  // timeout. ncclUniqueId is plain bytes (char internal[NCCL_UNIQUE_ID_BYTES]).
  ncclUniqueId id{};
  if (g->rank == 0) WEFT_NCCL_CHECK(ncclGetUniqueId(&id), o.where());
  bootstrap.broadcast(reinterpret_cast<uint8_t*>(&id), static_cast<int64_t>(sizeof id), 0);
  {
    DeviceGuard on(device);
    ncclConfig_t config = nonblocking_config();
    ncclComm_t comm = nullptr;
    const ncclResult_t rc = ncclCommInitRankConfig(&comm, g->size, id, g->rank, &config);
    g->comm = comm;  // from here on the Group owns it (and aborts it on failure)
    try {
      if (WEFT_NCCL_CHECK(rc, o.where()) == ncclInProgress) settle(o, comm, g->timeout_s);
    } catch (...) {
      g->abort("initialization failed");
      throw;
    }
  }
  return std::make_unique<NcclCommunicator>(std::move(g), bootstrap.timeout_seconds(), compute);
}

#endif  // WEFT_HAVE_NCCL

}  // namespace weft::comm::cuda
