// The Open MPI backend. Every operation is an MPI-3 nonblocking call whose request a Work waits on
// by polling MPI_Test, so a wait can give up after the communicator's timeout (a blocking MPI call
// cannot) and can leave the CPU to the other ranks: the tests run 4 ranks on 2 cores.

#include "weft/comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "weft/comm/poll.h"
#include "weft/core/check.h"
#include "weft/core/clock.h"

namespace weft::comm {
namespace {

using Clock = SteadyClock;

// All-reduces of at least this many bytes run on the Ring (below: MPI_Iallreduce, whose log2(p)
// rounds beat the ring's 2(p-1) steps on latency).
constexpr int64_t kRingMinBytes = int64_t{64} << 10;
// After a timeout, how long a cancelled point-to-point request may take to finish cancelling.
constexpr auto kCancelGrace = std::chrono::milliseconds(100);
// How long a wait runs before it also listens for a roll call (below).
constexpr auto kRollCallAfter = std::chrono::milliseconds(20);

bool mpi_live() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<size_t>(len));
}

MPI_Datatype mpi_type(DataType t) {
  // Indexed by DataType. BF16 is moved as its bits; reduced only by the Ring (reduce_into).
  const MPI_Datatype types[] = {MPI_FLOAT,   MPI_DOUBLE,  MPI_INT32_T,
                                MPI_INT64_T, MPI_UINT8_T, MPI_UINT16_T};
  return types[static_cast<size_t>(t)];
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX; }

// The group an operation runs on, as messages name it. Shared by the operations in flight, so a
// Work can outlive its communicator's name.
struct Group {
  std::string name;
  int rank = 0, size = 1;
  std::vector<int> world_ranks;  // of each rank of the group
};

// ---- Who did not arrive ----
// A rank that stops (SIGSTOP, a stuck kernel, a GPU fault, a partitioned network) is seen by its
// peers as a wait that times out, in a group whose rank numbers are its own. So the job names
// ranks by world rank and host, and after a timeout holds a roll call: the rank that gave up sends
// a note to every other rank on a communicator of the roll call's own; every rank that is waiting
// (any wait of any group) notices it, sends its own note to every rank and gives up too; after a
// grace period each of them names the ranks it heard nothing from. Every rank that can still
// report then names the same missing ranks, with the op, group and step it was in. Only in a job
// that ends on a timeout (MpiSession's roll_call: the CLI's commands), not in tests that time out
// on purpose and go on.
struct World {
  MPI_Comm roll_call = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD (MpiSession)
  int rank = 0, size = 1;
  std::vector<std::string> hosts;  // of each world rank (MPI_Get_processor_name)
  bool called = false;             // this process held or answered a roll call
  // The notes' payload: when this rank joined the roll call, and when each other rank did, as
  // heard (system clock, ms since the epoch). Kept here, not on a stack: a send to a stopped rank
  // never completes, and a receive still open after the grace is cancelled, so their buffers
  // outlive the call.
  int64_t joined_ms = 0;
  std::vector<int64_t> heard_ms;
};
World g_world;
constexpr int kRollCallTag = 1;

// "world rank 3 on node7"
std::string world_rank_name(int world_rank) {
  if (world_rank < 0 || world_rank >= static_cast<int>(g_world.hosts.size())) {
    return fmt::format("world rank {}", world_rank);
  }
  return fmt::format("world rank {} on {}", world_rank, g_world.hosts[world_rank]);
}

// Whether another rank has called the roll (a note waits on the roll call's communicator).
bool roll_called() {
  if (g_world.roll_call == MPI_COMM_NULL || g_world.called) return false;
  int flag = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, g_world.roll_call, &flag, MPI_STATUS_IGNORE);
  return flag != 0;
}

// "; the roll was called 7.1 s before this rank answered ..." when this rank joined it more than
// `grace_s` after the earliest rank it heard from: it was stopped or hung and has just woken, as
// a stopped rank does when the launcher ends the job (the others name it too). Hosts' clocks
// agree to well under the grace of 2 s or more.
std::string late_answer(const std::vector<bool>& heard, double grace_s) {
  int64_t began_ms = g_world.joined_ms;
  for (int r = 0; r < g_world.size; ++r) {
    // (0: a receive that ended in an error, no note)
    if (r != g_world.rank && heard[r] && g_world.heard_ms[r] > 0) {
      began_ms = std::min(began_ms, g_world.heard_ms[r]);
    }
  }
  const double behind_s = static_cast<double>(g_world.joined_ms - began_ms) / 1e3;
  if (behind_s <= grace_s) return "";
  return fmt::format(
      "; the roll was called {:.1f} s before this rank answered, past the {:g}-s grace: the job "
      "waited for this rank (stopped, hung, or computing for longer)",
      behind_s, grace_s);
}

// The roll call, once per process: a note to every other rank, then the others' notes for
// `grace_s`. Returns the ranks that did not answer, as a message's tail, and whether this rank
// was the late one. A note is the time its rank joined (World::joined_ms).
std::string roll_call(double grace_s) {
  if (g_world.roll_call == MPI_COMM_NULL || g_world.called || g_world.size < 2) return "";
  g_world.called = true;
  const int n = g_world.size, me = g_world.rank;
  g_world.joined_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  g_world.heard_ms.assign(static_cast<size_t>(n), 0);
  std::vector<MPI_Request> reqs(static_cast<size_t>(n), MPI_REQUEST_NULL);
  std::vector<bool> heard(static_cast<size_t>(n), false);
  heard[me] = true;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    MPI_Request req;
    if (MPI_Isend(&g_world.joined_ms, 1, MPI_INT64_T, r, kRollCallTag, g_world.roll_call, &req) ==
        MPI_SUCCESS) {
      MPI_Request_free(&req);
    }
    MPI_Irecv(&g_world.heard_ms[r], 1, MPI_INT64_T, r, kRollCallTag, g_world.roll_call, &reqs[r]);
  }
  poll_until(grace_s, [&] {
    bool all = true;
    for (int r = 0; r < n; ++r) {
      if (heard[r]) continue;
      int done = 0;
      if (MPI_Test(&reqs[r], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) reqs[r] = MPI_REQUEST_NULL;
      heard[r] = done != 0;
      all = all && heard[r];
    }
    return all;
  });
  std::vector<std::string> missing;
  for (int r = 0; r < n; ++r) {
    if (heard[r]) continue;
    missing.push_back(world_rank_name(r));
    if (reqs[r] != MPI_REQUEST_NULL) {
      MPI_Cancel(&reqs[r]);
      MPI_Request_free(&reqs[r]);
    }
  }
  const std::string late = late_answer(heard, grace_s);
  if (missing.empty()) {
    return late.empty() ? fmt::format("; every rank answered the roll call within {:g} s", grace_s)
                        : late;
  }
  return fmt::format(
      "; {} did not answer the roll call within {:g} s (stopped, hung, cut off, or computing for "
      "longer): the rank{} the job waits for{}",
      fmt::join(missing, ", "), grace_s, missing.size() > 1 ? "s" : "", late);
}

// How long a roll call waits for the answers: a tenth of the timeout, at least 2 s and at most
// the timeout itself (a rank that computes for longer than this is named too; it says so).
double roll_call_grace(double timeout_s) {
  return std::min(timeout_s, std::clamp(timeout_s / 10, 2.0, 30.0));
}

// One operation: what it is (for messages) and its request while in flight.
struct Op {
  const char* what;  // "all_reduce", "recv", ...
  std::shared_ptr<const Group> group;
  DataType dtype = DataType::F32;
  int64_t n = 0;
  int peer = -1;  // send/recv only
  int tag = 0;

  bool point_to_point() const { return peer >= 0; }
  // "recv on group 'tp' (rank 0 of 2)"
  std::string where() const {
    return fmt::format("{} on group '{}' (rank {} of {})", what, group->name, group->rank,
                       group->size);
  }
  // " (4 f32 from rank 1, tag 7)"; nothing for a barrier
  std::string detail() const {
    const std::string_view w = what;
    if (w == "barrier" || w == "split") return "";
    if (!point_to_point()) return fmt::format(" ({} {})", n, dtype_name(dtype));
    return fmt::format(" ({} {} {} rank {}, tag {})", n, dtype_name(dtype),
                       w == "send" ? "to" : "from", peer, tag);
  }
  // "; world rank 0 on node7, waiting for world rank 2 on node7": the job's numbers, which a
  // group's are not
  std::string world_names() const {
    std::string s = "; " + world_rank_name(world_rank(group->rank));
    if (point_to_point()) {
      s += fmt::format(", {} {}", std::string_view(what) == "send" ? "sending to" : "waiting for",
                       world_rank_name(world_rank(peer)));
    }
    return s;
  }
  int world_rank(int r) const {
    return r < static_cast<int>(group->world_ranks.size()) ? group->world_ranks[r] : -1;
  }
  void check(int rc) const {
    if (rc != MPI_SUCCESS) throw Error(where() + " failed: " + mpi_error_string(rc) + detail());
  }
};

// A request in flight and how to wait for it.
class Pending {
 public:
  Pending(Op op, double timeout_s) : op_(std::move(op)), timeout_s_(timeout_s) {}
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  MPI_Request* request() { return &req_; }

  // Polls until the request completes; throws weft::Error on an MPI error, after the timeout, or
  // when another rank calls the roll (then the job is ending: this rank says what it was waiting
  // for and whom nobody heard from).
  void wait() {
    const auto start = Clock::now();
    bool called = false;
    const auto done = [&] {
      if (test()) return true;
      // A probe costs about a microsecond: not while the op is likely to finish at once.
      called = Clock::now() - start > kRollCallAfter && roll_called();
      return called;
    };
    if (poll_until(timeout_s_, done) && !called) return;
    if (!called && give_up()) return;  // it completed while being cancelled
    const double grace = roll_call_grace(timeout_s_);
    const int64_t step = current_step();  // " at step 7" while training
    throw Error(fmt::format("{}{} {}{}{}{}", op_.where(),
                            step > 0 ? fmt::format(" at step {}", step) : "",
                            called ? "gave up: another rank timed out and called the roll"
                                   : fmt::format("timed out after {:g} s", timeout_s_),
                            op_.detail(), op_.world_names(), roll_call(grace)));
  }

  // Whether the request has completed (MPI_Test, which also progresses it); never blocks.
  bool poll() { return req_ == MPI_REQUEST_NULL || test(); }

  // A Work dropped without wait(): a receive is cancelled (its buffer may be gone), a send is left
  // to MPI to finish, and a collective, which cannot be cancelled, is completed here, unless the
  // stack is unwinding from an error: then the job is ending and waiting could only delay that.
  ~Pending() {
    if (req_ == MPI_REQUEST_NULL || !mpi_live()) return;
    if (op_.point_to_point()) {
      if (std::string_view(op_.what).ends_with("recv")) MPI_Cancel(&req_);
      MPI_Request_free(&req_);
    } else if (std::uncaught_exceptions() == 0) {
      try {
        wait();
      } catch (const Error&) {
        // Nothing can be reported from a destructor; the peers see their own timeout.
      }
    }
  }

 private:
  bool test() {
    int done = 0;
    const int rc = MPI_Test(&req_, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      req_ = MPI_REQUEST_NULL;  // an erroneous request is not waited on again
      op_.check(rc);
    }
    return done != 0;
  }

  // After a timeout. A point-to-point request is cancelled, so nothing is left to match a later
  // message; returns true when it turns out to have completed after all. A collective cannot be
  // cancelled (MPI-3.1 §5.12): it stays in flight, its buffers must stay alive and the group is
  // unusable; the caller is expected to end the job (abort_job).
  bool give_up() {
    if (!op_.point_to_point()) {
      req_ = MPI_REQUEST_NULL;
      return false;
    }
    MPI_Cancel(&req_);
    const auto start = Clock::now();
    while (Clock::now() - start < kCancelGrace) {
      int done = 0;
      MPI_Status status;
      if (MPI_Test(&req_, &done, &status) != MPI_SUCCESS) {
        req_ = MPI_REQUEST_NULL;
        return false;
      }
      if (done) {
        int cancelled = 0;
        MPI_Test_cancelled(&status, &cancelled);
        return !cancelled;
      }
      std::this_thread::yield();
    }
    // Open MPI cannot cancel a send the receiver has not matched: MPI frees it when it ends.
    MPI_Request_free(&req_);
    return false;
  }

  Op op_;
  double timeout_s_;
  MPI_Request req_ = MPI_REQUEST_NULL;
};

// The ring operations' receive and sum buffers, kept for the next operation of the group. A fresh
// allocation of a large block is fresh pages: Open MPI's single-copy transport (CMA) faulted in
// every page of every receive, and on a virtualized host a fault costs microseconds. That was most
// of ZeRO 2's reductions (pipe-8l, dp 2, 4 microbatches: 236 ms a step alone, the step 1.97x
// ZeRO 0's). It keeps every block given back: as many as rings were ever in flight at once (two
// each, one at p = 2), and a new one where a request is larger than any that is free.
class ScratchPool {
 public:
  // A block of at least `bytes`: the smallest kept one that is large enough, else a new one.
  std::unique_ptr<char[]> take(size_t& bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->first >= bytes && (best == free_.end() || it->first < best->first)) best = it;
    }
    if (best == free_.end()) return std::make_unique_for_overwrite<char[]>(bytes);
    bytes = best->first;
    std::unique_ptr<char[]> block = std::move(best->second);
    free_.erase(best);
    return block;
  }
  void give(std::unique_ptr<char[]> block, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace_back(bytes, std::move(block));
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> free_;
};

// A block of a ScratchPool, given back when it goes.
struct GiveBack {
  std::shared_ptr<ScratchPool> pool;
  size_t bytes = 0;
  void operator()(char* block) const { pool->give(std::unique_ptr<char[]>(block), bytes); }
};
using Scratch = std::unique_ptr<char[], GiveBack>;
Scratch take_scratch(const std::shared_ptr<ScratchPool>& pool, size_t bytes) {
  std::unique_ptr<char[]> block = pool->take(bytes);
  return Scratch(block.release(), GiveBack{pool, bytes});
}

// A reduce-scatter over a ring of point-to-point messages (Patarasuk & Yuan 2009; the first half
// of the ring all-reduce NCCL and Horovod run): in step k = 0 .. p-2, rank r sends block
// (r-k-1) mod p to rank r+1 (its own input block at k = 0, else the sum it completed in step k-1)
// and receives block (r-k-2) mod p from rank r-1, to which it adds its own input block; the block
// received last is block r, the result. Every rank sends, receives and adds (p-1)/p of the buffer.
// Open MPI 4.1's MPI_Ireduce_scatter_block (libnbc) instead reduces the whole buffer to rank 0
// over a binomial tree and scatters from there: rank 0 receives and adds p-1 whole buffers, the
// bottleneck of ZeRO 1-3's gradient reductions on one core per rank (docs/parallelism.md).
//
// With the second half, an all-gather (in step k = 0 .. p-2 rank r passes block (r-k) mod p on to
// rank r+1 and receives block (r-k-1) mod p in its place), it is the all-reduce of bf16, whose sum
// depends on the order of the adds (communicator.h): each block is reduced in one order on one
// rank and copied to the others, so every rank gets the same bits by construction, whichever
// algorithm Open MPI's settings would pick for MPI_Iallreduce, and without a user-defined MPI_Op
// to create after MPI_Init and free before MPI_Finalize.
class Ring {
 public:
  // Where a ring runs: `tag` must be unique among the ring operations in flight on `comm` (a
  // communicator of their own: no other message can match theirs); its buffers come from `scratch`.
  struct Where {
    MPI_Comm comm;
    int tag;
    double timeout_s;
    std::shared_ptr<ScratchPool> scratch;
  };
  // reduce-scatter: `in` holds size blocks of n elements, block `rank` of their sum goes to `out`
  // (which may be `in`).
  static std::shared_ptr<Ring> reduce_scatter(const Op& op, const Where& at, void* out,
                                              const void* in, int64_t n) {
    auto ring = std::shared_ptr<Ring>(new Ring(op, at, in));
    ring->out_ = out;
    ring->start(op.group->size * n, n, ReduceOp::Sum);
    return ring;
  }
  // all-reduce of data[n] in place; the blocks are the n elements split as evenly as they go.
  static std::shared_ptr<Ring> all_reduce(const Op& op, const Where& at, void* data, int64_t n,
                                          ReduceOp reduce) {
    auto ring = std::shared_ptr<Ring>(new Ring(op, at, data));
    ring->all_ = data;
    const int p = op.group->size;
    ring->total_ = n;
    ring->out_ = ring->block(op.group->rank);
    ring->start(n, (n + p - 1) / p, reduce);
    return ring;
  }
  // all-gather: block `rank` of out[size * n] is `in` (which may be that block), the others come
  // from the other ranks: the all-reduce's gathering half alone.
  static std::shared_ptr<Ring> all_gather(const Op& op, const Where& at, void* out, const void* in,
                                          int64_t n) {
    auto ring = std::shared_ptr<Ring>(new Ring(op, at, in));
    const int p = op.group->size, r = op.group->rank;
    ring->all_ = out;
    ring->total_ = p * n;
    if (in != ring->block(r)) {
      std::memmove(ring->block(r), in, static_cast<size_t>(n) * dtype_size(op.dtype));
    }
    ring->step_ = p - 1;  // the first gathering step
    ring->steps_ = 2 * (p - 1);
    ring->post(ring->block(r), n, ring->block(r - 1), n);
    return ring;
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  ~Ring() {
    // Dropped without wait(): finish, as for a collective, unless an error unwinds the stack.
    if (done() || std::uncaught_exceptions() > 0 || !mpi_live()) return;
    try {
      wait();
    } catch (const Error&) {
    }
  }

  bool poll() {
    while (!done()) {
      if (!send_->poll() || !recv_->poll()) return false;
      advance();
    }
    return true;
  }
  void wait() {
    while (!done()) {
      send_->wait();
      recv_->wait();
      advance();
    }
  }

 private:
  Ring(const Op& op, const Where& at, const void* in)
      : op_(op),
        comm_(at.comm),
        tag_(at.tag),
        in_(in),
        timeout_s_(at.timeout_s),
        next_(wrap(op.group->rank + 1)),
        prev_(wrap(op.group->rank - 1)),
        scratch_(at.scratch) {}

  // `total` elements in the p blocks, none longer than `longest`.
  void start(int64_t total, int64_t longest, ReduceOp reduce) {
    const int p = op_.group->size, r = op_.group->rank;
    total_ = total;
    reduce_ = reduce;
    steps_ = (all_ != nullptr ? 2 : 1) * (p - 1);
    const auto bytes = static_cast<size_t>(longest) * dtype_size(op_.dtype);
    // Not zero-filled: the receives and the sums write them before they are read.
    recv_buf_ = take_scratch(scratch_, bytes);
    if (p > 2) sum_buf_ = take_scratch(scratch_, bytes);
    // Step 0 sends this rank's own input block.
    post(in_block(r - 1), count(r - 1), recv_buf_.get(), count(r - 2));
  }

  bool done() const { return step_ == steps_; }
  int wrap(int b) const {
    const int p = op_.group->size;
    return (b % p + p) % p;
  }
  // Block b's first element, b in [0, p]: the blocks split `total_` as evenly as it goes (into
  // equal ones for a reduce-scatter, whose total is p*n).
  int64_t first(int b) const { return b * total_ / op_.group->size; }
  int64_t count(int b) const { return first(wrap(b) + 1) - first(wrap(b)); }
  size_t offset(int b) const { return static_cast<size_t>(first(wrap(b))) * dtype_size(op_.dtype); }
  const char* in_block(int b) const { return static_cast<const char*>(in_) + offset(b); }
  char* block(int b) const { return static_cast<char*>(all_) + offset(b); }

  // Posts the current step's send of `data` and receive into `into`.
  void post(const void* data, int64_t send_n, void* into, int64_t recv_n) {
    const std::string_view what = op_.what;
    Op s = op_, rv = op_;
    s.what = what == "all_gather"   ? "all_gather ring send"
             : what == "all_reduce" ? "all_reduce ring send"
                                    : "reduce_scatter ring send";
    s.peer = next_;
    rv.what = what == "all_gather"   ? "all_gather ring recv"
              : what == "all_reduce" ? "all_reduce ring recv"
                                     : "reduce_scatter ring recv";
    rv.peer = prev_;
    s.tag = rv.tag = tag_;
    send_ = std::make_unique<Pending>(s, timeout_s_);
    recv_ = std::make_unique<Pending>(rv, timeout_s_);
    const MPI_Datatype t = mpi_type(op_.dtype);
    s.check(MPI_Isend(data, static_cast<int>(send_n), t, next_, tag_, comm_, send_->request()));
    rv.check(MPI_Irecv(into, static_cast<int>(recv_n), t, prev_, tag_, comm_, recv_->request()));
  }
  // The step's messages are complete. Reducing: add this rank's input to the received block, into
  // the output after the last reducing step (every send is complete by then, so `out` may alias
  // `in`), else into the block the next step sends. Then the gathering steps, if any, pass the
  // reduced blocks on, each received straight into its place.
  void advance() {
    const int p = op_.group->size, r = op_.group->rank;
    const int k = step_++;
    if (k < p - 1) {
      const int b = r - k - 2;
      const char* own = in_block(b);
      const bool reduced = step_ == p - 1;
      void* dst = reduced ? out_ : sum_buf_.get();
      reduce_into(dst, own, recv_buf_.get(), count(b), op_.dtype, reduce_);
      if (!reduced) {
        post(sum_buf_.get(), count(b), recv_buf_.get(), count(b - 1));
        return;
      }
    }
    if (done()) return;
    const int g = step_ - (p - 1);  // the gathering step to post
    post(block(r - g), count(r - g), block(r - g - 1), count(r - g - 1));
  }

  Op op_;
  MPI_Comm comm_;
  int tag_;
  const void* in_;
  void* out_ = nullptr;
  void* all_ = nullptr;  // the all-reduce's buffer; null for a reduce-scatter
  int64_t total_ = 0;
  ReduceOp reduce_ = ReduceOp::Sum;
  double timeout_s_;
  int next_ = 0, prev_ = 0, step_ = 0, steps_ = 0;
  std::shared_ptr<ScratchPool> scratch_;
  Scratch recv_buf_, sum_buf_;
  std::unique_ptr<Pending> send_, recv_;  // after the buffers: destroyed (cancelled) first
};

// The group of `comm`, named `name`, with the world rank of each of its ranks.
std::shared_ptr<const Group> group_of(MPI_Comm comm, std::string name) {
  auto g = std::make_shared<Group>();
  g->name = std::move(name);
  MPI_Comm_rank(comm, &g->rank);
  MPI_Comm_size(comm, &g->size);
  std::vector<int> mine(static_cast<size_t>(g->size));
  std::iota(mine.begin(), mine.end(), 0);
  g->world_ranks.assign(mine.size(), -1);
  MPI_Group group, world_group;
  if (MPI_Comm_group(comm, &group) != MPI_SUCCESS) return g;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_translate_ranks(group, g->size, mine.data(), world_group, g->world_ranks.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return g;
}

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (MPI_Comm_free) when `owned`; MPI_COMM_WORLD is not owned.
  MpiCommunicator(MPI_Comm comm, bool owned, std::shared_ptr<const Group> g,
                  std::optional<double> timeout_s = {})
      : Communicator(g->name, g->rank, g->size, timeout_s),
        comm_(comm),
        owned_(owned),
        group_(std::move(g)) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~MpiCommunicator() override {
    if (!mpi_live()) return;
    if (ring_comm_ != MPI_COMM_NULL) MPI_Comm_free(&ring_comm_);
    if (owned_) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  Work all_reduce_async(void* data, int64_t n, DataType t, ReduceOp op) override {
    const Op o = make_op("all_reduce", t, n);
    check_reducible(o.where(), t);
    // bf16 always (its sum depends on the order of the adds); the other types from kRingMinBytes
    // on, where Open MPI 4.1's MPI_Iallreduce (libnbc) faulted in fresh temporaries each time, as
    // the ring did before its ScratchPool: ZeRO 0's reductions of pipe-8l at dp 2 took 75 ms a step
    // alone on it, 5 ms on the ring (bench/results/zero-2026-12-06-*).
    if (t == DataType::BF16 && size() == 1) return Work();  // MPI has no bf16 to pass it to
    if (size() > 1 &&
        (t == DataType::BF16 || n * static_cast<int64_t>(dtype_size(t)) >= kRingMinBytes)) {
      auto ring = Ring::all_reduce(o, ring_where(o), data, n, op);
      return Work([ring] { ring->wait(); }, [ring] { return ring->poll(); });
    }
    return start(o, [&](MPI_Request* req) {
      return MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), mpi_type(t), mpi_op(op), comm_,
                            req);
    });
  }

  Work reduce_scatter_async(void* out, const void* in, int64_t n, DataType t) override {
    const Op o = make_op("reduce_scatter", t, n);
    check_reducible(o.where(), t);
    // In place (out == in): the size*n inputs are read from `out` and the result left first.
    if (size() == 1) {
      if (out != in) std::memmove(out, in, static_cast<size_t>(n) * dtype_size(t));
      return Work();
    }
    auto ring = Ring::reduce_scatter(o, ring_where(o), out, in, n);
    return Work([ring] { ring->wait(); }, [ring] { return ring->poll(); });
  }

  Work all_gather_async(void* out, const void* in, int64_t n, DataType t) override {
    const Op o = make_op("all_gather", t, n);
    // In place when the input already sits in this rank's block of the output.
    const void* own = static_cast<const char*>(out) + rank() * n * int64_t(dtype_size(t));
    const void* send = in == own ? MPI_IN_PLACE : in;
    // From kRingMinBytes on, the Ring's gathering half (as all_reduce_async: libnbc's
    // temporaries; ZeRO 1-3 gather every parameter each step, ZeRO 3 every pass).
    if (size() > 1 && size() * n * static_cast<int64_t>(dtype_size(t)) >= kRingMinBytes) {
      auto ring = Ring::all_gather(o, ring_where(o), out, in, n);
      return Work([ring] { ring->wait(); }, [ring] { return ring->poll(); });
    }
    return start(o, [&](MPI_Request* req) {
      return MPI_Iallgather(send, static_cast<int>(n), mpi_type(t), out, static_cast<int>(n),
                            mpi_type(t), comm_, req);
    });
  }

  Work broadcast_async(void* data, int64_t n, DataType t, int root) override {
    Op o = make_op("broadcast", t, n);
    if (root < 0 || root >= size())
      throw Error(fmt::format("{}: root {} is not a rank of the group", o.where(), root));
    return start(o, [&](MPI_Request* req) {
      return MPI_Ibcast(data, static_cast<int>(n), mpi_type(t), root, comm_, req);
    });
  }

  Work send_async(const void* data, int64_t n, DataType t, int peer, int tag) override {
    const Op o = make_p2p_op("send", t, n, peer, tag);
    return start(o, [&](MPI_Request* req) {
      return MPI_Isend(data, static_cast<int>(n), mpi_type(t), peer, tag, comm_, req);
    });
  }

  Work recv_async(void* data, int64_t n, DataType t, int peer, int tag) override {
    const Op o = make_p2p_op("recv", t, n, peer, tag);
    return start(o, [&](MPI_Request* req) {
      return MPI_Irecv(data, static_cast<int>(n), mpi_type(t), peer, tag, comm_, req);
    });
  }

  void barrier() override { meet(make_op("barrier", DataType::U8, 0)); }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    const Op o = make_op("split", DataType::U8, 0);
    if (color < 0) throw Error(fmt::format("{}: color {} must be >= 0", o.where(), color));
    // MPI_Comm_split blocks without a timeout: meet in a barrier first, which has one, so a peer
    // that never arrives is an error here rather than a hang.
    meet(o);
    MPI_Comm sub = MPI_COMM_NULL;
    o.check(MPI_Comm_split(comm_, color, key, &sub));
    return std::make_unique<MpiCommunicator>(sub, true, group_of(sub, name), timeout_seconds());
  }

 private:
  Op make_op(const char* what, DataType t, int64_t n) const {
    Op o{.what = what, .group = group_, .dtype = t, .n = n};
    if (n < 0 || n > INT_MAX) {
      throw Error(fmt::format("{}: count {} is outside [0, {}]", o.where(), n, INT_MAX));
    }
    return o;
  }
  Op make_p2p_op(const char* what, DataType t, int64_t n, int peer, int tag) const {
    Op o = make_op(what, t, n);
    if (peer < 0 || peer >= size()) {
      throw Error(fmt::format("{}: peer {} is not a rank of the group", o.where(), peer));
    }
    if (tag < 0) throw Error(fmt::format("{}: tag {} must be >= 0", o.where(), tag));
    o.peer = peer;
    o.tag = tag;
    return o;
  }
  // A barrier under the name of `o`.
  void meet(const Op& o) {
    start(o, [&](MPI_Request* req) { return MPI_Ibarrier(comm_, req); }).wait();
  }
  // The next ring operation's place. The Ring's messages get a communicator of their own (created
  // collectively, as the ring operations that call this are), so no other point-to-point message
  // on this group can match. Every rank starts its ring operations in the same order: the same tag
  // for the same operation. At most a handful are in flight at once, far fewer than the tags (MPI
  // guarantees 32767).
  Ring::Where ring_where(const Op& o) {
    if (ring_comm_ == MPI_COMM_NULL) {
      o.check(MPI_Comm_dup(comm_, &ring_comm_));
      MPI_Comm_set_errhandler(ring_comm_, MPI_ERRORS_RETURN);
    }
    return {ring_comm_, ring_tag_++ % 32768, timeout_seconds(), scratch_};
  }
  // Posts the nonblocking call `post(&request)` and returns the Work that waits for it.
  template <typename Post>
  Work start(const Op& o, Post&& post) {
    auto p = std::make_shared<Pending>(o, timeout_seconds());
    o.check(post(p->request()));
    return Work([p] { p->wait(); }, [p] { return p->poll(); });
  }

  MPI_Comm comm_;
  bool owned_;
  std::shared_ptr<const Group> group_;
  MPI_Comm ring_comm_ = MPI_COMM_NULL;  // the Ring operations' messages
  int ring_tag_ = 0;
  std::shared_ptr<ScratchPool> scratch_ = std::make_shared<ScratchPool>();
};

}  // namespace

bool launched_by_mpi() {
  return std::ranges::any_of(std::array{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"},
                             [](const char* var) { return std::getenv(var) != nullptr; });
}

MpiSession::MpiSession(bool roll_call) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  WEFT_CHECK(!initialized && !finalized,
             "MPI was already started in this process: one MpiSession per process");
  // Open MPI's nonblocking all-reduce (libnbc) picks a binomial tree below 4 ranks, which on 2
  // ranks takes about twice as long as a ring for 1M floats (and no less for one float); the
  // ring was never slower in our measurements on 2 and 4 ranks. An explicit setting wins.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) throw Error("MPI_Init_thread failed: " + mpi_error_string(rc));
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    throw Error(fmt::format("MPI provides thread level {}, below MPI_THREAD_FUNNELED", provided));
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  // Each world rank's host, and the roll call's communicator (Who did not arrive, above).
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<size_t>(g_world.size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, MPI_COMM_WORLD);
  for (int r = 0; r < g_world.size; ++r) {
    g_world.hosts.emplace_back(all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  }
  if (roll_call) {
    MPI_Comm_dup(MPI_COMM_WORLD, &g_world.roll_call);
    MPI_Comm_set_errhandler(g_world.roll_call, MPI_ERRORS_RETURN);
    // NCCL's waits (comm/cuda) take part through communicator.h's hook.
    set_roll_call({[] { return roll_called(); },
                   [](double timeout_s) { return comm::roll_call(roll_call_grace(timeout_s)); }});
  }
}

MpiSession::~MpiSession() {
  if (!mpi_live()) return;
  if (g_world.roll_call != MPI_COMM_NULL) MPI_Comm_free(&g_world.roll_call);
  MPI_Finalize();
}

std::unique_ptr<Communicator> MpiSession::world() const {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false,
                                           group_of(MPI_COMM_WORLD, "world"));
}

void abort_job(const std::string& message, int exit_code) {
  const bool live = mpi_live();
  int rank = 0;
  if (live) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // "[rank 1] error: " (on node7 when the job spans hosts)
  const bool hosts = std::adjacent_find(g_world.hosts.begin(), g_world.hosts.end(),
                                        std::not_equal_to<>()) != g_world.hosts.end();
  const std::string prefix =
      !live   ? "error: "
      : hosts ? fmt::format("[rank {} on {}] error: ", rank, g_world.hosts.at(rank))
              : fmt::format("[rank {}] error: ", rank);
  std::fflush(stdout);
  std::fprintf(stderr, "%s%s\n", prefix.c_str(), message.c_str());
  std::fflush(stderr);
  if (live) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

}  // namespace weft::comm
