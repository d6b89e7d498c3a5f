#pragma once
// A pipeline rank's send buffers of one kind (schedule/send_buffers.h, docs/schedules.md §4): K
// stage boundaries ([Ns,C] activations) in the backend's memory, taken in turn. The k-th output
// of a step goes to buffer k mod K; taking a buffer first waits for the send of the output that
// held it (or checks that the next stage on this rank read it), as schedule::simulate with these
// counts waits, which proved the programs cannot deadlock. So a rank holds K boundaries per kind
// however many microbatches a step has.

#include <cstdint>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/core/check.h"
#include "weft/kernels/backend.h"

namespace weft::runtime {

class SendPool {
 public:
  SendPool() = default;
  // `count` buffers of `bytes` each from `backend`, taken now: a step allocates nothing.
  SendPool(kernels::Backend& backend, int count, int64_t bytes) {
    buffers_.resize(count);
    for (Buffer& b : buffers_) b.data = static_cast<kernels::Act*>(backend.allocate(bytes));
  }

  // The buffer for stage's output of microbatch mb (or its input gradient): the next turn's,
  // once the output it held before has left.
  kernels::Act* take(int stage, int mb) {
    WEFT_CHECK(!buffers_.empty(), "stage ", stage, " has no send buffer for microbatch ", mb);
    Buffer& b = buffers_[turn_++ % buffers_.size()];
    WEFT_CHECK(!b.unread, "stage ", b.stage, " microbatch ", b.mb,
               "'s output was neither sent nor read before its buffer's next turn");
    b.send.order();
    b.stage = stage;
    b.mb = mb;
    b.unread = true;
    return b.data;
  }
  // The buffer holding that output.
  kernels::Act* held(int stage, int mb) { return find(stage, mb).data; }
  // Its send: the buffer's next turn waits for it.
  void sending(int stage, int mb, comm::Work work) {
    Buffer& b = find(stage, mb);
    b.send = std::move(work);
    b.unread = false;
  }
  // Read by the next stage on this rank: free.
  void read(int stage, int mb) { find(stage, mb).unread = false; }
  // The end of a step (every send was posted): waits for them all; the next step's turns start
  // at buffer 0, as the schedule's do.
  void finish_step() {
    for (Buffer& b : buffers_) {
      WEFT_CHECK(!b.unread, "stage ", b.stage, " microbatch ", b.mb,
                 "'s output was neither sent nor read in its step");
      b.send.order();
      b.stage = b.mb = -1;
    }
    turn_ = 0;
  }
  // Sends still in flight when the runtime goes (not while an error unwinds: the peer may never
  // receive).
  void drain() noexcept {
    for (Buffer& b : buffers_) {
      try {
        b.send.wait();
      } catch (const std::exception&) {
      }
    }
  }

 private:
  struct Buffer {
    kernels::Act* data = nullptr;
    int stage = -1, mb = -1;
    comm::Work send;
    bool unread = false;  // taken, and neither sent nor read yet
  };
  Buffer& find(int stage, int mb) {
    for (Buffer& b : buffers_) {
      if (b.stage == stage && b.mb == mb) return b;
    }
    WEFT_FAIL("no send buffer holds stage ", stage, " microbatch ", mb);
  }

  std::vector<Buffer> buffers_;
  size_t turn_ = 0;
};

}  // namespace weft::runtime
