// The MPI backend's process-level helpers without MPI running: abort_job exits with the message
// and code; launched_by_mpi reads the launcher's environment.

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "weft/comm/mpi_communicator.h"

namespace weft::comm {
namespace {

// Unsets the launchers' variables for one scope, setting `name` (if given) to 1.
class LauncherEnv {
 public:
  explicit LauncherEnv(const char* name = nullptr) {
    for (const char* var : kVars) {
      if (const char* v = std::getenv(var)) saved_[index(var)] = v;
      unsetenv(var);
    }
    if (name) setenv(name, "1", 1);
  }
  ~LauncherEnv() {
    for (const char* var : kVars) {
      if (saved_[index(var)]) {
        setenv(var, saved_[index(var)]->c_str(), 1);
      } else {
        unsetenv(var);
      }
    }
  }

 private:
  static constexpr const char* kVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  static int index(const char* var) {
    for (int i = 0; i < 3; ++i) {
      if (std::string(kVars[i]) == var) return i;
    }
    return 0;
  }
  std::optional<std::string> saved_[3];
};

TEST(LaunchedByMpi, IsFalseWithoutALaunchersEnvironment) {
  LauncherEnv env;
  EXPECT_FALSE(launched_by_mpi());
}

TEST(LaunchedByMpi, RecognizesOpenMpiAndPmiLaunchers) {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    LauncherEnv env(var);
    EXPECT_TRUE(launched_by_mpi()) << var;
  }
}

TEST(AbortJobDeathTest, WithoutMpiPrintsTheMessageAndExitsWithTheCode) {
  EXPECT_EXIT(abort_job("disk full\nwhile writing step 7", 3), testing::ExitedWithCode(3),
              "error: disk full\nwhile writing step 7");
}

}  // namespace
}  // namespace weft::comm
