// The thread backend (thread_communicator.h). The ranks of a group share one Group: a mutex and
// condition variable for collectives, another pair for point-to-point mailboxes.
//
// A collective runs in two phases. Arrival: each rank posts its arguments and pointers; the last
// to arrive checks that the posts match and publishes them as the round, and everyone wakes.
// Copying: each rank then reads its peers' buffers directly (all_reduce: each rank reduces its own
// slice of the elements and writes that slice into every rank's buffer; the others: each rank
// fills its own output), and the ranks meet once more before returning, so no rank reuses or
// frees a buffer a peer is still reading. Arrival honours the timeout; the second meeting does
// not need to (see leave()).

#include "support/thread_communicator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "weft/core/check.h"

namespace weft::comm {
namespace {

using Clock = std::chrono::steady_clock;

// now + seconds, clamped so a huge timeout cannot overflow the clock.
Clock::time_point deadline_after(double seconds) {
  const double s = std::min(seconds, 1e9);
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

enum class Kind { AllReduce, ReduceScatter, AllGather, Broadcast, Barrier, Split };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce:
      return "all_reduce";
    case Kind::ReduceScatter:
      return "reduce_scatter";
    case Kind::AllGather:
      return "all_gather";
    case Kind::Broadcast:
      return "broadcast";
    case Kind::Barrier:
      return "barrier";
    case Kind::Split:
      return "split";
  }
  WEFT_FAIL("unknown collective ", static_cast<int>(k));
}

bool has_buffer(Kind k) { return k != Kind::Barrier && k != Kind::Split; }
bool reduces(Kind k) { return k == Kind::AllReduce || k == Kind::ReduceScatter; }

// One rank's call of a collective, as its peers see it.
struct Post {
  Kind kind = Kind::Barrier;
  DataType dtype = DataType::U8;
  int64_t n = 0;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  int color = 0, key = 0;
  void* out = nullptr;
  const void* in = nullptr;
};

// "all_reduce(4 f32, sum)": a post in a mismatch message.
std::string describe(const Post& p) {
  switch (p.kind) {
    case Kind::AllReduce:
      return fmt::format("all_reduce({} {}, {})", p.n, dtype_name(p.dtype), reduce_op_name(p.op));
    case Kind::ReduceScatter:
    case Kind::AllGather:
      return fmt::format("{}({} {})", kind_name(p.kind), p.n, dtype_name(p.dtype));
    case Kind::Broadcast:
      return fmt::format("broadcast({} {}, root {})", p.n, dtype_name(p.dtype), p.root);
    case Kind::Barrier:
      return "barrier";
    case Kind::Split:
      return fmt::format("split(color {}, key {})", p.color, p.key);
  }
  return "?";
}

struct Group;

// A collective once every rank has arrived: the ranks' posts (or why they do not match) and, for a
// split, each rank's new group and its rank there.
struct Round {
  std::vector<Post> posts;
  std::string error;
  std::vector<std::pair<std::shared_ptr<Group>, int>> split;
};

// A posted receive. The sender that matches it copies straight into `data`, as MPI may.
struct Ticket {
  void* data = nullptr;
  size_t bytes = 0;
  bool done = false;
  std::string error;  // set with done when the message did not fit
};

// The messages of one (receiver, sender, tag): at most one of the two queues is non-empty.
struct Channel {
  std::deque<std::vector<std::byte>> messages;   // sent, unmatched, in send order
  std::deque<std::shared_ptr<Ticket>> receives;  // posted, unmatched, in post order
};
using ChannelKey = std::tuple<int, int, int>;  // (receiver, sender, tag)

struct Group {
  explicit Group(int n) : size(n), posts(static_cast<size_t>(n)) {}
  const int size;

  // Collectives (guarded by mu).
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<Post>> posts;  // the collective being gathered
  int arrived = 0;
  uint64_t generation = 0;  // collectives whose ranks have all arrived
  // The last such collective. It stays put until every rank has arrived at the next one, so a
  // rank that wakes late still finds its own round here.
  std::shared_ptr<const Round> round;
  int leaving = 0;
  uint64_t left_generation = 0;
  std::string broken;  // why the group is unusable (a rank timed out in a collective); "" if not

  // Point-to-point (guarded by mail_mu).
  std::mutex mail_mu;
  std::condition_variable mail_cv;
  std::map<ChannelKey, Channel> channels;
};

// Copies a message into a posted receive (mail_mu held). A longer message than the buffer is an
// error, as MPI's truncation; a shorter one fills the front of it.
void deliver(const void* src, size_t bytes, Ticket& t) {
  if (bytes > t.bytes) {
    t.error = fmt::format("the message ({} bytes) is longer than the receive buffer ({} bytes)",
                          bytes, t.bytes);
  } else if (bytes > 0) {
    std::memcpy(t.data, src, bytes);
  }
  t.done = true;
}

// Drops an unmatched receive from its channel (mail_mu held), as MPI cancels one.
void cancel(Group& g, const ChannelKey& key, const std::shared_ptr<Ticket>& t) {
  auto it = g.channels.find(key);
  if (it == g.channels.end()) return;
  auto& q = it->second.receives;
  q.erase(std::remove(q.begin(), q.end(), t), q.end());
  if (q.empty() && it->second.messages.empty()) g.channels.erase(it);
}

// A receive not yet matched when recv_async returned; its Work waits here.
class PendingRecv {
 public:
  PendingRecv(std::shared_ptr<Group> g, ChannelKey key, std::shared_ptr<Ticket> t,
              std::string where, std::string detail, double timeout_s)
      : g_(std::move(g)),
        key_(key),
        t_(std::move(t)),
        where_(std::move(where)),
        detail_(std::move(detail)),
        timeout_s_(timeout_s) {}
  PendingRecv(const PendingRecv&) = delete;
  PendingRecv& operator=(const PendingRecv&) = delete;
  // A Work dropped unwaited cancels its receive (its buffer may be gone), as the MPI backend does.
  ~PendingRecv() {
    std::lock_guard lock(g_->mail_mu);
    if (!t_->done) cancel(*g_, key_, t_);
  }

  void wait() {
    std::unique_lock lock(g_->mail_mu);
    if (!g_->mail_cv.wait_until(lock, deadline_after(timeout_s_), [&] { return t_->done; })) {
      cancel(*g_, key_, t_);
      throw Error(fmt::format("{} timed out after {:g} s{}", where_, timeout_s_, detail_));
    }
    if (!t_->error.empty()) throw Error(fmt::format("{}: {}{}", where_, t_->error, detail_));
  }
  bool poll() {
    std::lock_guard lock(g_->mail_mu);
    return t_->done;
  }

 private:
  std::shared_ptr<Group> g_;
  ChannelKey key_;
  std::shared_ptr<Ticket> t_;
  std::string where_, detail_;
  double timeout_s_;
};

// Why the ranks' posts of one collective cannot run together; "" when they can.
std::string check_round(const std::vector<Post>& posts) {
  const Post& a = posts[0];
  for (const Post& p : posts) {
    bool same = p.kind == a.kind;
    if (same && has_buffer(a.kind)) same = p.dtype == a.dtype && p.n == a.n;
    if (same && a.kind == Kind::AllReduce) same = p.op == a.op;
    if (same && a.kind == Kind::Broadcast) same = p.root == a.root;
    if (!same) {
      std::string calls;
      for (size_t r = 0; r < posts.size(); ++r) {
        calls += fmt::format("{}rank {} {}", r ? ", " : "", r, describe(posts[r]));
      }
      return "the ranks called different collectives: " + calls;
    }
  }
  if (has_buffer(a.kind) && a.n < 0) return fmt::format("negative count {}", a.n);
  if (reduces(a.kind) && a.dtype == DataType::U8) {
    return fmt::format("{} cannot be reduced (f32, f64, i32, i64 and bf16 can)",
                       dtype_name(a.dtype));
  }
  const int size = static_cast<int>(posts.size());
  if (a.kind == Kind::Broadcast && (a.root < 0 || a.root >= size)) {
    return fmt::format("root {} is not a rank of the group", a.root);
  }
  if (a.kind == Kind::Split) {
    for (int r = 0; r < size; ++r) {
      if (posts[r].color < 0)
        return fmt::format("color {} of rank {} must be >= 0", posts[r].color, r);
    }
  }
  return "";
}

// The new groups of a split: one Group per color, made here once and shared by its members,
// ordered by (key, rank).
void make_split(Round& round) {
  std::map<int, std::vector<std::pair<int, int>>> members;  // color -> (key, rank)
  for (size_t r = 0; r < round.posts.size(); ++r) {
    members[round.posts[r].color].emplace_back(round.posts[r].key, static_cast<int>(r));
  }
  round.split.resize(round.posts.size());
  for (auto& [color, m] : members) {
    std::sort(m.begin(), m.end());
    auto g = std::make_shared<Group>(static_cast<int>(m.size()));
    for (size_t i = 0; i < m.size(); ++i) round.split[m[i].second] = {g, static_cast<int>(i)};
  }
}

// dst[0, n) = the ranks' inputs from byte `off` on, reduced in rank order: the first add reads
// both of its operands from the inputs (reduce_into's three-operand form) instead of copying the
// first and adding the second onto the copy. Same order, so the same bits.
void fold(void* dst, const std::vector<Post>& posts, size_t off, int64_t n, DataType t,
          ReduceOp op) {
  const auto in = [&](size_t q) { return static_cast<const std::byte*>(posts[q].in) + off; };
  if (posts.size() == 1) {
    std::memcpy(dst, in(0), static_cast<size_t>(n) * dtype_size(t));
    return;
  }
  reduce_into(dst, in(0), in(1), n, t, op);
  for (size_t q = 2; q < posts.size(); ++q) reduce_into(dst, in(q), n, t, op);
}

// Elements per all-reduce tile: 16 KiB of the widest type stays in L1 while the ranks' inputs are
// folded into it.
constexpr size_t kTileBytes = 16384;

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> g, int rank, std::string name,
                     std::optional<double> timeout_s = {})
      : Communicator(std::move(name), rank, g->size, timeout_s), g_(std::move(g)) {}

  Work all_reduce_async(void* data, int64_t n, DataType t, ReduceOp op) override {
    const auto round =
        arrive({.kind = Kind::AllReduce, .dtype = t, .n = n, .op = op, .out = data, .in = data});
    // This rank owns a slice of the elements (whole cache lines, so no two ranks write one): it
    // folds every rank's slice into a tile, in rank order, and writes the tile to every rank.
    // No other rank touches those elements, so reading and writing them in place is safe. One
    // fold copied everywhere is also what gives every rank the same bits where the sum depends on
    // its order (bf16, and floats in general).
    const size_t es = dtype_size(t);
    const int64_t per_rank = (n + size() - 1) / size();
    const int64_t line = std::max<int64_t>(16, 64 / static_cast<int64_t>(es));
    const int64_t slice = (per_rank + line - 1) / line * line;
    const int64_t lo = std::min(n, rank() * slice), hi = std::min(n, lo + slice);
    alignas(64) std::byte tile[kTileBytes];
    const int64_t per_tile = static_cast<int64_t>(kTileBytes / es);
    const auto& posts = round->posts;
    for (int64_t j = lo; j < hi; j += per_tile) {
      const int64_t c = std::min(per_tile, hi - j);
      const size_t off = static_cast<size_t>(j) * es, bytes = static_cast<size_t>(c) * es;
      fold(tile, posts, off, c, t, op);
      for (const Post& p : posts) std::memcpy(static_cast<std::byte*>(p.out) + off, tile, bytes);
    }
    leave();
    return {};
  }

  Work reduce_scatter_async(void* out, const void* in, int64_t n, DataType t) override {
    // In place (out == in) the result overwrites the front of the input, which rank 0 reads: sum
    // into a buffer of our own and copy it out once every rank is done reading.
    const size_t es = dtype_size(t);
    std::vector<std::byte> sum(static_cast<size_t>(std::max<int64_t>(n, 0)) * es);
    const auto round =
        arrive({.kind = Kind::ReduceScatter, .dtype = t, .n = n, .out = out, .in = in});
    const size_t off = static_cast<size_t>(rank()) * sum.size();
    const auto& posts = round->posts;
    if (!sum.empty()) fold(sum.data(), posts, off, n, t, ReduceOp::Sum);
    leave();
    if (!sum.empty()) std::memcpy(out, sum.data(), sum.size());
    return {};
  }

  Work all_gather_async(void* out, const void* in, int64_t n, DataType t) override {
    const auto round = arrive({.kind = Kind::AllGather, .dtype = t, .n = n, .out = out, .in = in});
    // Each rank fills only its own output. In place, a rank's input is its own block of its output,
    // the one block it does not write (the copy onto itself is skipped), so peers may read it.
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 0)) * dtype_size(t);
    for (size_t q = 0; q < round->posts.size() && bytes > 0; ++q) {
      std::byte* dst = static_cast<std::byte*>(out) + q * bytes;
      const void* src = round->posts[q].in;
      if (src != dst) std::memmove(dst, src, bytes);
    }
    leave();
    return {};
  }

  Work broadcast_async(void* data, int64_t n, DataType t, int root) override {
    const auto round = arrive(
        {.kind = Kind::Broadcast, .dtype = t, .n = n, .root = root, .out = data, .in = data});
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 0)) * dtype_size(t);
    if (rank() != root && bytes > 0) std::memcpy(data, round->posts[root].in, bytes);
    leave();
    return {};
  }

  Work send_async(const void* data, int64_t n, DataType t, int peer, int tag) override {
    check_p2p("send", n, peer, tag);
    const size_t bytes = static_cast<size_t>(n) * dtype_size(t);
    const ChannelKey key{peer, rank(), tag};
    // Eager: the data is copied now (into a waiting receive, or into the mailbox) and the send is
    // complete; the pipeline runner relies on a send never waiting for its receiver.
    std::lock_guard lock(g_->mail_mu);
    Channel& ch = g_->channels[key];
    if (ch.receives.empty()) {
      const auto* p = static_cast<const std::byte*>(data);
      ch.messages.emplace_back(p, p + bytes);
      return {};
    }
    const auto ticket = std::move(ch.receives.front());
    ch.receives.pop_front();
    deliver(data, bytes, *ticket);
    if (ch.receives.empty() && ch.messages.empty()) g_->channels.erase(key);
    g_->mail_cv.notify_all();
    return {};
  }

  Work recv_async(void* data, int64_t n, DataType t, int peer, int tag) override {
    check_p2p("recv", n, peer, tag);
    auto ticket = std::make_shared<Ticket>();
    ticket->data = data;
    ticket->bytes = static_cast<size_t>(n) * dtype_size(t);
    const ChannelKey key{rank(), peer, tag};
    bool matched = false;
    {
      std::lock_guard lock(g_->mail_mu);
      Channel& ch = g_->channels[key];
      if (ch.messages.empty()) {
        ch.receives.push_back(ticket);
      } else {
        matched = true;
        const auto& m = ch.messages.front();
        deliver(m.data(), m.size(), *ticket);
        ch.messages.pop_front();
        if (ch.receives.empty() && ch.messages.empty()) g_->channels.erase(key);
      }
    }
    const std::string detail = p2p_detail("recv", n, t, peer, tag);
    // Matched here: this thread filled the ticket, so it may read it without the lock. Otherwise
    // it is queued and a sender may fill it at any time: only the lock may read it then.
    if (matched) {
      if (!ticket->error.empty()) {
        throw Error(fmt::format("{}: {}{}", where("recv"), ticket->error, detail));
      }
      return {};
    }
    auto p = std::make_shared<PendingRecv>(g_, key, std::move(ticket), where("recv"), detail,
                                           timeout_seconds());
    return Work([p] { p->wait(); }, [p] { return p->poll(); });
  }

  void barrier() override { arrive({.kind = Kind::Barrier}); }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    const auto round = arrive({.kind = Kind::Split, .color = color, .key = key});
    const auto& [group, sub_rank] = round->split[rank()];
    return std::make_unique<ThreadCommunicator>(group, sub_rank, name, timeout_seconds());
  }

 private:
  // "all_reduce on group 'tp' (rank 1 of 2)", as the MPI backend names an operation.
  std::string where(const char* what) const {
    return fmt::format("{} on group '{}' (rank {} of {})", what, name(), rank(), size());
  }
  static std::string detail(const Post& p) {
    return has_buffer(p.kind) ? fmt::format(" ({} {})", p.n, dtype_name(p.dtype)) : "";
  }
  static std::string p2p_detail(const char* what, int64_t n, DataType t, int peer, int tag) {
    return fmt::format(" ({} {} {} rank {}, tag {})", n, dtype_name(t),
                       std::string_view(what) == "send" ? "to" : "from", peer, tag);
  }
  void check_p2p(const char* what, int64_t n, int peer, int tag) const {
    if (n < 0) throw Error(fmt::format("{}: negative count {}", where(what), n));
    if (peer < 0 || peer >= size()) {
      throw Error(fmt::format("{}: peer {} is not a rank of the group", where(what), peer));
    }
    if (tag < 0) throw Error(fmt::format("{}: tag {} must be >= 0", where(what), tag));
  }

  // The arrival phase: posts `p` and returns once every rank has posted its call (the round),
  // or throws: on a timeout, when the group is unusable, or when the posts do not match (then
  // every rank of the collective throws, and the group stays usable: every rank used its turn).
  std::shared_ptr<const Round> arrive(const Post& p) {
    const char* what = kind_name(p.kind);
    const double timeout_s = timeout_seconds();
    std::unique_lock lock(g_->mu);
    if (!g_->broken.empty()) {
      throw Error(fmt::format("{}: the group is unusable: {}", where(what), g_->broken));
    }
    if (g_->posts[rank()]) {
      throw Error(
          fmt::format("{}: this rank already has a collective in flight (a thread "
                      "communicator is used by one thread only)",
                      where(what)));
    }
    g_->posts[rank()] = p;
    const uint64_t gen = g_->generation;
    if (++g_->arrived == g_->size) {
      auto round = std::make_shared<Round>();
      round->posts.reserve(g_->posts.size());
      for (auto& q : g_->posts) {
        round->posts.push_back(*q);
        q.reset();
      }
      round->error = check_round(round->posts);
      if (round->error.empty() && p.kind == Kind::Split) make_split(*round);
      g_->round = std::move(round);
      g_->arrived = 0;
      ++g_->generation;
      g_->cv.notify_all();
    } else {
      g_->cv.wait_until(lock, deadline_after(timeout_s),
                        [&] { return g_->generation != gen || !g_->broken.empty(); });
      if (g_->generation == gen) {
        // Not everyone came: withdraw (no peer has read our pointers: they are read only once
        // all have arrived) and make the group unusable, since its ranks no longer agree on
        // which collective is which.
        g_->posts[rank()].reset();
        --g_->arrived;
        if (!g_->broken.empty()) {
          throw Error(fmt::format("{}: the group is unusable: {}", where(what), g_->broken));
        }
        g_->broken = fmt::format("rank {} timed out in {}", rank(), what);
        g_->cv.notify_all();
        throw Error(fmt::format("{} timed out after {:g} s{}", where(what), timeout_s, detail(p)));
      }
    }
    auto round = g_->round;
    if (!round->error.empty()) throw Error(fmt::format("{}: {}", where(what), round->error));
    return round;
  }

  // The second meeting: returns once every rank has finished reading its peers' buffers. It has
  // no timeout on purpose: every rank has arrived and is only copying, so all come soon, and a
  // rank that gave up here would let its caller free a buffer a peer is still reading.
  void leave() {
    std::unique_lock lock(g_->mu);
    const uint64_t gen = g_->left_generation;
    if (++g_->leaving == g_->size) {
      g_->leaving = 0;
      ++g_->left_generation;
      g_->cv.notify_all();
      return;
    }
    g_->cv.wait(lock, [&] { return g_->left_generation != gen; });
  }

  std::shared_ptr<Group> g_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n,
                                                                     const std::string& name) {
  WEFT_CHECK(n >= 1, "a thread group of ", n, " ranks: it needs at least one");
  auto g = std::make_shared<Group>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  out.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadCommunicator>(g, r, name));
  return out;
}

}  // namespace weft::comm
