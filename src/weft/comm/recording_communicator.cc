#include "weft/comm/recording_communicator.h"

#include <iterator>

#include "weft/core/check.h"
#include "weft/core/clock.h"

namespace weft::comm {

namespace {
constexpr std::string_view kCommOpNames[] = {"all_reduce", "reduce_scatter", "all_gather",
                                             "broadcast",  "send",           "recv",
                                             "barrier"};  // indexed by CommOp
}  // namespace

std::string_view comm_op_name(CommOp op) {
  const auto i = static_cast<size_t>(op);
  if (i >= std::size(kCommOpNames)) WEFT_FAIL("unknown CommOp ", static_cast<int>(op));
  return kCommOpNames[i];
}

size_t CommRecorder::add(CommRecord r) {
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(std::move(r));
  return records_.size() - 1;
}

void CommRecorder::add_seconds(size_t index, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index < records_.size()) records_[index].seconds += seconds;  // clear() may have run
}

double CommRecorder::seconds(const std::string& group) const {
  return total<double>(std::nullopt, group, [](const CommRecord& r) { return r.seconds; });
}

std::vector<CommRecord> CommRecorder::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

void CommRecorder::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  records_.clear();
}

int64_t CommRecorder::bytes(CommOp op, const std::string& group) const {
  return total<int64_t>(op, group, [](const CommRecord& r) { return r.bytes; });
}

int64_t CommRecorder::count(CommOp op, const std::string& group) const {
  return total<int64_t>(op, group, [](const CommRecord&) { return 1; });
}

namespace {
const Communicator& wrapped(const std::unique_ptr<Communicator>& inner) {
  WEFT_CHECK(inner != nullptr, "RecordingCommunicator needs a communicator to wrap");
  return *inner;
}
}  // namespace

// The waits happen in the inner communicator: the base is a copy of it.
RecordingCommunicator::RecordingCommunicator(std::unique_ptr<Communicator> inner,
                                             std::shared_ptr<CommRecorder> rec)
    : Communicator(wrapped(inner)), inner_(std::move(inner)), rec_(std::move(rec)) {
  WEFT_CHECK(rec_ != nullptr, "RecordingCommunicator needs a recorder");
}

Work RecordingCommunicator::record(CommOp op, DataType t, int64_t elements,
                                   const std::function<Work()>& issue, int peer) {
  const auto start = SteadyClock::now();
  const size_t index = rec_->add(CommRecord{.op = op,
                                            .group = inner_->name(),
                                            .group_size = inner_->size(),
                                            .dtype = t,
                                            .elements = elements,
                                            .bytes = elements * static_cast<int64_t>(dtype_size(t)),
                                            .peer = peer});
  // The waits happen in the inner communicator: it waits as long as this one was told to.
  inner_->set_timeout_seconds(timeout_seconds());
  // After recording: an op that fails to start is recorded too. Shared by the two ways to finish.
  auto inner = std::make_shared<Work>(issue());
  auto finish = [inner, rec = rec_, index, start](void (Work::*how)()) {
    ((*inner).*how)();
    rec->add_seconds(index, seconds_since(start));
  };
  return Work([finish] { finish(&Work::wait); }, [inner] { return inner->test(); },
              [finish] { finish(&Work::order); });
}

Work RecordingCommunicator::all_reduce_async(void* data, int64_t n, DataType t, ReduceOp op) {
  return record(CommOp::AllReduce, t, n, [&] { return inner_->all_reduce_async(data, n, t, op); });
}

Work RecordingCommunicator::reduce_scatter_async(void* out, const void* in, int64_t n, DataType t) {
  return record(CommOp::ReduceScatter, t, n * inner_->size(),
                [&] { return inner_->reduce_scatter_async(out, in, n, t); });
}

Work RecordingCommunicator::all_gather_async(void* out, const void* in, int64_t n, DataType t) {
  return record(CommOp::AllGather, t, n * inner_->size(),
                [&] { return inner_->all_gather_async(out, in, n, t); });
}

Work RecordingCommunicator::broadcast_async(void* data, int64_t n, DataType t, int root) {
  return record(CommOp::Broadcast, t, n, [&] { return inner_->broadcast_async(data, n, t, root); });
}

Work RecordingCommunicator::send_async(const void* data, int64_t n, DataType t, int peer, int tag) {
  return record(
      CommOp::Send, t, n, [&] { return inner_->send_async(data, n, t, peer, tag); }, peer);
}

Work RecordingCommunicator::recv_async(void* data, int64_t n, DataType t, int peer, int tag) {
  return record(
      CommOp::Recv, t, n, [&] { return inner_->recv_async(data, n, t, peer, tag); }, peer);
}

void RecordingCommunicator::barrier() {
  record(CommOp::Barrier, DataType::U8, 0, [this] {
    inner_->barrier();
    return Work();
  }).wait();
}

std::unique_ptr<Communicator> RecordingCommunicator::split(int color, int key,
                                                           const std::string& name) {
  inner_->set_timeout_seconds(timeout_seconds());  // the new group inherits this one's timeout
  return std::make_unique<RecordingCommunicator>(inner_->split(color, key, name), rec_);
}

}  // namespace weft::comm
