// A job in which one rank fails (DESIGN.md §5): under mpirun -n 2 or more, rank 1 throws in the
// middle of a loop of all-reduces while the other ranks wait in the next one. main turns the
// exception into abort_job, which must end every rank at once with rank 1's message; the ctest
// comm_failing_rank_ends_the_job checks the exit code, the message and the time.

#include <exception>
#include <vector>

#include "weft/comm/mpi_communicator.h"
#include "weft/core/check.h"

int main() {
  weft::comm::MpiSession session;
  try {
    std::unique_ptr<weft::comm::Communicator> world = session.world();
    std::vector<float> grads(4096, 1.0f);
    for (int step = 0; step < 1000; ++step) {
      if (world->rank() == 1 && step == 10) {
        throw weft::Error("injected failure at step 10\n(a second line of the message)");
      }
      world->all_reduce(grads.data(), static_cast<int64_t>(grads.size()));
    }
  } catch (const std::exception& e) {
    weft::comm::abort_job(e.what());
  }
  return 0;
}
