#pragma once
// Stragglers (issue 38): one slow rank (a throttled GPU, a noisy neighbour, a failing disk) slows
// every step of the job, and nothing says which. Each rank adds up, per log interval, the time its
// steps computed (step time minus the time blocked in communication, comm::waiting_seconds) and
// the time they waited; at the interval's end the ranks gather them, the leader writes them to
// metrics.jsonl (rank_compute_ms, rank_comm_ms), and a rank whose compute stayed more than
// kStragglerMargin above the median for kStragglerIntervals intervals in a row is named on the
// progress line. The slow rank's peers show it too, as waiting.

#include <string>
#include <vector>

#include "weft/comm/communicator.h"
#include "weft/runtime/metrics.h"

namespace weft::runtime {

inline constexpr double kStragglerMargin = 0.2;
inline constexpr int kStragglerIntervals = 3;

class StragglerWatch {
 public:
  // `world`: the job's ranks (null: one process); `names`: each world rank's, for the message.
  StragglerWatch(comm::Communicator* world, std::vector<std::string> names);

  // After each step: its compute and communication time.
  void add(const StepRecord& r);
  // At the end of a log interval, on every rank at the same step (it gathers): every rank's mean
  // compute and communication per step into `r`; returns the warning naming a rank that has just
  // become a straggler (the same on every rank), or "".
  std::string end_interval(StepRecord& r);

 private:
  comm::Communicator* world_;
  std::vector<std::string> names_;
  double compute_ = 0, comm_ = 0;
  int steps_ = 0;
  std::vector<int> streak_;  // per rank: intervals in a row above the margin
};

}  // namespace weft::runtime
