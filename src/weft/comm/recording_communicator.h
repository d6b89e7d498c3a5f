#pragma once
// A Communicator that forwards to another one and records every operation: what it was, on which
// group, and how many elements and bytes the logical tensor has. Tests assert the volumes of the
// PTD-P analysis with it; the planner's communication volume is checked against a real step.
//
// Convention for `elements`: all_reduce and broadcast: the buffer; all_gather: the gathered
// output (size * n); reduce_scatter: the input (size * n); send/recv: the message. So an
// all-reduce of b*s*h elements and the all-gather + reduce-scatter pair that sequence parallelism
// uses in its place record the same b*s*h each.

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"

namespace weft::comm {

enum class CommOp { AllReduce, ReduceScatter, AllGather, Broadcast, Send, Recv, Barrier };
std::string_view comm_op_name(CommOp op);

struct CommRecord {
  CommOp op;
  std::string group;  // the communicator's name()
  int group_size = 1;
  DataType dtype = DataType::F32;
  int64_t elements = 0;  // see the convention above
  int64_t bytes = 0;     // elements * dtype_size
  int peer = -1;         // send/recv only
  double seconds = 0;    // from the call until its wait() returned (waiting for peers included)
};

// Shared by a RecordingCommunicator and every communicator split() from it.
class CommRecorder {
 public:
  size_t add(CommRecord r);  // returns its index
  void add_seconds(size_t index, double seconds);
  std::vector<CommRecord> records() const;
  void clear();
  // Total bytes of one op kind on one group ("" = any group).
  int64_t bytes(CommOp op, const std::string& group = "") const;
  int64_t count(CommOp op, const std::string& group = "") const;
  // Total seconds spent in communication on one group ("" = any): the communication time of a
  // step, for the benchmarks' communication share.
  double seconds(const std::string& group = "") const;

 private:
  // The sum of value(r) over the records of `op` (any: nullopt) on `group` ("" = any).
  template <typename T, typename Value>
  T total(std::optional<CommOp> op, const std::string& group, Value value) const {
    std::lock_guard<std::mutex> lock(mu_);
    T sum = 0;
    for (const CommRecord& r : records_) {
      if ((!op || r.op == *op) && (group.empty() || r.group == group)) sum += value(r);
    }
    return sum;
  }

  mutable std::mutex mu_;
  std::vector<CommRecord> records_;
};

// timeout_seconds() starts as the inner communicator's; a timeout set on the RecordingCommunicator
// is passed to the inner one before each operation and split (where the waits happen).
class RecordingCommunicator : public Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<CommRecorder> rec);
  const CommRecorder& recorder() const { return *rec_; }
  std::shared_ptr<CommRecorder> shared_recorder() const { return rec_; }

  Work all_reduce_async(void* data, int64_t n, DataType t, ReduceOp op) override;
  Work reduce_scatter_async(void* out, const void* in, int64_t n, DataType t) override;
  Work all_gather_async(void* out, const void* in, int64_t n, DataType t) override;
  Work broadcast_async(void* data, int64_t n, DataType t, int root) override;
  Work send_async(const void* data, int64_t n, DataType t, int peer, int tag) override;
  Work recv_async(void* data, int64_t n, DataType t, int peer, int tag) override;
  void barrier() override;
  void wait_ordered() override { inner_->wait_ordered(); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

 private:
  // Records the op, then issues it, and returns its Work wrapped so its completion time is
  // recorded too.
  Work record(CommOp op, DataType t, int64_t elements, const std::function<Work()>& issue,
              int peer = -1);
  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<CommRecorder> rec_;
};

}  // namespace weft::comm
