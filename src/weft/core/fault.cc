#include "weft/core/fault.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ranges>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace weft {
namespace {

struct Fault {
  std::string point;
  int64_t index = -1;
  int rank = -1;  // -1: any
  int signal = SIGKILL;
};

int signal_named(const std::string& name) {
  if (name == "TERM") return SIGTERM;
  if (name == "INT") return SIGINT;
  if (name == "USR1") return SIGUSR1;
  if (name == "STOP") return SIGSTOP;
  return SIGKILL;
}

// "<point>:<index>[:<rank>[:<signal>]]" separated by commas; malformed entries are ignored.
std::vector<Fault> parse(const char* spec) {
  std::vector<Fault> faults;
  if (spec == nullptr) return faults;
  for (const auto entry : std::string_view(spec) | std::views::split(',')) {
    std::vector<std::string> fields;
    for (const auto field : entry | std::views::split(':')) {
      fields.emplace_back(field.begin(), field.end());
    }
    if (fields.size() < 2) continue;
    Fault f;
    f.point = fields[0];
    f.index = std::atoll(fields[1].c_str());
    if (fields.size() > 2 && !fields[2].empty()) f.rank = std::atoi(fields[2].c_str());
    if (fields.size() > 3) f.signal = signal_named(fields[3]);
    faults.push_back(f);
  }
  return faults;
}

int world_rank() {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  return r != nullptr ? std::atoi(r) : 0;
}

// This rank's fault at `point` (at `index`, unless it is -1).
const Fault* find(std::string_view point, int64_t index) {
  static const std::vector<Fault> faults = parse(std::getenv("WEFT_FAULT"));
  for (const Fault& f : faults) {
    if (f.point == point && (index < 0 || f.index == index) &&
        (f.rank < 0 || f.rank == world_rank())) {
      return &f;
    }
  }
  return nullptr;
}

// Until no thread has the signal pending: the thread that waits for it took it (stop_signals.cc),
// then a moment for it to be handed on. At most 5 s.
void wait_until_taken(int sig) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, sig) != 1 || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

}  // namespace

bool fault_requested(std::string_view point, int64_t index) {
  return index >= 0 && find(point, index) != nullptr;
}

int64_t fault_value(std::string_view point) {
  const Fault* f = find(point, -1);
  return f != nullptr ? f->index : -1;
}

void fault_point(std::string_view point, int64_t index) {
  const Fault* f = index >= 0 ? find(point, index) : nullptr;
  if (f == nullptr) return;
  ::kill(::getpid(), f->signal);
  if (f->signal != SIGKILL && f->signal != SIGSTOP) wait_until_taken(f->signal);
}

}  // namespace weft
