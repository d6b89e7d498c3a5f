#pragma once
// The communicator contract (weft/comm/communicator.h) as one suite of tests, written once in
// conformance.cc and run over every implementation (issue 42): each test binary instantiates the
// suite for the kinds it can make (INSTANTIATE_TEST_SUITE_P(Name, Conformance, ...)):
//   comm_test           Local, Recording (over thread ranks)
//   comm_thread_test    Thread (ranks are threads)
//   comm_mpi_test       Mpi (under mpirun at 1, 2 and 4 ranks)
//   comm_cuda_test      Staged and Nccl at size 1 (skipped without a GPU)
//   comm_cuda_mpi_test  Staged and Nccl over MPI (skipped without a GPU)
// A kind says how to run a test body on every rank of a group of a given size, where its
// buffers live (host or device memory), and where its contract differs from the rest (NCCL
// matches messages by order, not tag). What only one implementation does (the MPI ring's
// cancellation, the thread ranks' timeouts, the recording format) stays in that implementation's
// own test file.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"

namespace weft::comm::test {

// Where a kind's buffers live. A test body makes every buffer it passes to the communicator
// through put() and reads every result back through get(), so one body runs on host and on
// device memory alike. Buffers live until the body returns.
class Memory {
 public:
  virtual ~Memory() = default;

  template <typename T>
  T* put(const std::vector<T>& v) {
    const size_t bytes = v.size() * sizeof(T);
    T* p = static_cast<T*>(allocate(bytes));
    if (bytes > 0) upload(p, v.data(), bytes);
    return p;
  }
  template <typename T>
  std::vector<T> get(const T* p, int64_t n) {
    std::vector<T> v(static_cast<size_t>(n));
    if (n > 0) download(v.data(), p, v.size() * sizeof(T));
    return v;
  }

 protected:
  // At least `bytes` (even 0: a valid pointer), aligned for any element type.
  virtual void* allocate(size_t bytes) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
};

// Plain host memory: the buffers of the host communicators.
class HostMemory final : public Memory {
 protected:
  void* allocate(size_t bytes) override {
    blocks_.push_back(std::make_unique<std::max_align_t[]>(bytes / sizeof(std::max_align_t) + 1));
    return blocks_.back().get();
  }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

 private:
  std::vector<std::unique_ptr<std::max_align_t[]>> blocks_;
};

// A test body: runs on one rank, with that rank's communicator and memory.
using Body = std::function<void(Communicator&, Memory&)>;

struct Kind {
  // The group sizes this process can make, each run by every test that fits it.
  std::vector<int> sizes;
  // Runs `body` on the ranks this process holds of a group of `size` named `name`: all of them,
  // each on a thread, where ranks are threads; its own rank under MPI. Under MPI a `size` below
  // the world's splits it into groups of `size` (rank / size is the color), and the ranks left
  // over form a smaller group that runs `body` too: every body reads the size it got.
  std::function<void(int size, const std::string& name, const Body& body)> run;
  // Why this kind cannot run here ("" when it can): the test is skipped with this message.
  std::string skip;

  // ---- where the contract lets an implementation differ (communicator.h, nccl_communicator.h) --
  // Point-to-point messages are matched by (peer, tag), and sends and receives may be posted in
  // any order; false for NCCL, which matches them by order and whose send blocks its stream
  // until the peer receives.
  bool tagged_messages = true;
  // A rank may send to itself (as in MPI): the tests of messages run on groups of one too.
  bool messages_to_self = false;
  // reduce_scatter in place is out == in + rank*n (NCCL's form); otherwise out == in.
  bool reduce_scatter_in_place_at_own_block = false;
  // split() with a negative color returns nullptr (NCCL); otherwise it is an error.
  bool negative_color_joins_no_group = false;
  // What a receive into too small a buffer says right after naming the op and group ("recv on
  // group 'g' (rank 1 of 2)"); the error also names the peer and tag. "" where not checked.
  std::string truncation_says;
  // A receive that times out, or is dropped unwaited, is cancelled: the group goes on and a later
  // message with the same tag reaches a later receive.
  bool cancels_receives = false;
};

// A kind by name, made when a test starts (under the MPI test main the world exists only then).
struct KindFactory {
  std::string name;
  std::function<Kind()> make;
};

class Conformance : public testing::TestWithParam<KindFactory> {
 protected:
  void SetUp() override;
  // Runs body on every rank of a group of each of the kind's sizes of at least `min_size`; skips
  // the test when there is none.
  void on_groups(const Body& body, int min_size = 1);
  // The same on a group of exactly `size` ranks; skips the test when the kind cannot make one.
  void on_group(int size, const Body& body);
  // The largest of the kind's sizes (the world, under MPI): for the tests of large messages and
  // of timeouts, which need not run on every size.
  int largest_group();
  // The smallest group that has someone to send to: 1 where a rank may send to itself, else 2.
  int p2p_min() const { return kind_.messages_to_self ? 1 : 2; }

  Kind kind_;
};

std::string kind_name(const testing::TestParamInfo<KindFactory>& info);
// gtest prints the kind's name where a test fails ("where GetParam() = Thread").
inline void PrintTo(const KindFactory& kind, std::ostream* os) { *os << kind.name; }

// Ranks as threads of this process (support/thread_communicator.h), on host memory: sizes 1 to 4.
// Each rank's communicator waits at most 10 s, so a bug that hangs fails instead.
Kind thread_kind();
// The same at sizes 1 and 4, each rank's communicator wrapped by `wrap`: for the communicators
// that wrap another one.
Kind wrapped_thread_kind(
    std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>)> wrap);
// Each rank's communicator wrapped in a RecordingCommunicator (one shared recorder).
Kind recording_kind();

// Runs body(rank's communicator) on one thread per communicator and joins them; a rank that
// throws is a test failure naming the rank. The runner of the kinds whose ranks are threads.
void run_on_threads(const std::vector<std::unique_ptr<Communicator>>& comms,
                    const std::function<std::unique_ptr<Memory>()>& make_memory, const Body& body);

}  // namespace weft::comm::test
