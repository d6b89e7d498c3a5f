// The shared main of the MPI tests (DESIGN.md §6). It starts an MpiSession, runs the tests on every
// rank and makes the ranks agree on each verdict: after every test the ranks exchange their
// results, so a test that fails on one rank fails the run on all of them (and the exit code of
// every rank says so). Rank 0 prints gtest's usual progress; every rank prints its own failures,
// each line prefixed with "[rank r]".

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "support/mpi_test.h"
#include "weft/core/check.h"

namespace weft::test {
namespace {

comm::Communicator* g_world = nullptr;

// "[rank 1] " before every line of `text`.
std::string prefix_lines(int rank, const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    out += "[rank " + std::to_string(rank) + "] " + line + "\n";
  }
  return out;
}

// Wraps gtest's default printer: rank 0 forwards the progress to it, the other ranks stay quiet;
// failures are printed by this class on every rank, with the rank.
class RankPrinter : public testing::TestEventListener {
 public:
  RankPrinter(std::unique_ptr<testing::TestEventListener> printer, comm::Communicator& world)
      : printer_(std::move(printer)), world_(world), rank_(world.rank()) {}

  bool any_failed() const { return !failed_.empty(); }

  void OnTestProgramStart(const testing::UnitTest& u) override {
    if (rank_ == 0) printer_->OnTestProgramStart(u);
  }
  void OnTestIterationStart(const testing::UnitTest& u, int iteration) override {
    if (rank_ == 0) {
      printer_->OnTestIterationStart(u, iteration);
      std::printf("[----------] on %d MPI rank%s\n", world_.size(), world_.size() == 1 ? "" : "s");
    }
  }
  void OnEnvironmentsSetUpStart(const testing::UnitTest& u) override {
    if (rank_ == 0) printer_->OnEnvironmentsSetUpStart(u);
  }
  void OnEnvironmentsSetUpEnd(const testing::UnitTest& u) override {
    if (rank_ == 0) printer_->OnEnvironmentsSetUpEnd(u);
  }
  void OnTestSuiteStart(const testing::TestSuite& s) override {
    if (rank_ == 0) printer_->OnTestSuiteStart(s);
  }
  void OnTestStart(const testing::TestInfo& t) override {
    if (rank_ == 0) printer_->OnTestStart(t);
  }
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) {
      if (rank_ == 0) printer_->OnTestPartResult(r);  // skips
      return;
    }
    std::ostringstream os;
    if (r.file_name() != nullptr) os << r.file_name() << ":" << r.line_number() << ": ";
    os << "Failure\n" << r.message() << "\n";
    std::fputs(prefix_lines(rank_, os.str()).c_str(), stdout);
    std::fflush(stdout);
  }
  // The agreement: every rank learns which ranks failed this test.
  void OnTestEnd(const testing::TestInfo& t) override {
    const int32_t mine = t.result()->Failed() ? 1 : 0;
    std::vector<int32_t> all(static_cast<size_t>(world_.size()));
    try {
      world_.all_gather(all.data(), &mine, 1);
    } catch (const std::exception& e) {
      comm::abort_job(std::string("the MPI test main could not agree on a verdict: ") + e.what());
    }
    std::string ranks;
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    const std::string name = std::string(t.test_suite_name()) + "." + t.name();
    if (ranks.empty()) {
      if (rank_ == 0) printer_->OnTestEnd(t);
      return;
    }
    failed_.push_back(name + " (failed on rank" +
                      (ranks.find(',') == std::string::npos ? " " : "s ") + ranks + ")");
    if (rank_ == 0) {
      std::printf("[  FAILED  ] %s\n", failed_.back().c_str());
      std::fflush(stdout);
    }
  }
  void OnTestSuiteEnd(const testing::TestSuite& s) override {
    if (rank_ == 0) printer_->OnTestSuiteEnd(s);
  }
  void OnEnvironmentsTearDownStart(const testing::UnitTest& u) override {
    if (rank_ == 0) printer_->OnEnvironmentsTearDownStart(u);
  }
  void OnEnvironmentsTearDownEnd(const testing::UnitTest& u) override {
    if (rank_ == 0) printer_->OnEnvironmentsTearDownEnd(u);
  }
  // Rank 0's summary counts what failed on any rank.
  void OnTestIterationEnd(const testing::UnitTest& u, int iteration) override {
    if (rank_ != 0) return;
    if (failed_.empty()) {
      printer_->OnTestIterationEnd(u, iteration);
      return;
    }
    std::printf("[==========] %d tests ran on %d MPI ranks.\n", u.test_to_run_count(),
                world_.size());
    std::printf("[  FAILED  ] %zu test%s, listed below:\n", failed_.size(),
                failed_.size() == 1 ? "" : "s");
    for (const std::string& f : failed_) std::printf("[  FAILED  ] %s\n", f.c_str());
    std::fflush(stdout);
  }
  void OnTestProgramEnd(const testing::UnitTest& u) override {
    if (rank_ == 0) printer_->OnTestProgramEnd(u);
  }

 private:
  std::unique_ptr<testing::TestEventListener> printer_;
  comm::Communicator& world_;
  int rank_;
  std::vector<std::string> failed_;
};

}  // namespace

comm::Communicator& test_world() {
  WEFT_CHECK(g_world != nullptr, "test_world() is only available under the MPI test main");
  return *g_world;
}

}  // namespace weft::test

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  weft::comm::MpiSession session;
  std::unique_ptr<weft::comm::Communicator> world = session.world();
  weft::test::g_world = world.get();
  // The verdicts travel on a communicator of their own, so a test that leaves a collective
  // unmatched on the world (one rank failed an assertion and skipped it) cannot be confused with
  // the agreement.
  std::unique_ptr<weft::comm::Communicator> verdicts = world->split(0, world->rank(), "verdicts");

  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  std::unique_ptr<testing::TestEventListener> printer(
      listeners.Release(listeners.default_result_printer()));
  auto* rank_printer = new weft::test::RankPrinter(std::move(printer), *verdicts);
  listeners.Append(rank_printer);  // gtest owns it

  const int rc = RUN_ALL_TESTS();
  // Failures outside a test (an environment's set-up, say) count too.
  int32_t failed = rc != 0 || rank_printer->any_failed() ? 1 : 0;
  try {
    verdicts->all_reduce(&failed, 1, weft::comm::ReduceOp::Max);
  } catch (const std::exception& e) {
    weft::comm::abort_job(std::string("the MPI test main could not agree on a verdict: ") +
                          e.what());
  }
  weft::test::g_world = nullptr;
  verdicts.reset();
  world.reset();
  return failed ? 1 : 0;
}
