#pragma once
// The Open MPI backend (host buffers; loopback transports btl self,vader on one machine).
// Only the runtime and the CLI link it (library weft_comm_mpi), so the planner and the model stay
// free of MPI.

#include <memory>
#include <string>

#include "weft/comm/communicator.h"

namespace weft::comm {

// True when this process was started by mpirun/mpiexec (Open MPI's or a PMI launcher's
// environment is present). A plain `weft train` then runs as one process without MPI.
bool launched_by_mpi();

// Owns MPI_Init/MPI_Finalize for the life of the process's parallel work. One per process.
// `roll_call`: a wait that times out calls the roll and names the ranks that did not answer, and
// every wait answers a roll call and gives up (mpi_communicator.cc, "Who did not arrive"): for a
// job that ends on a timeout, not for one that times out on purpose and goes on (the tests).
class MpiSession {
 public:
  explicit MpiSession(bool roll_call = false);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // MPI_COMM_WORLD as a Communicator named "world".
  std::unique_ptr<Communicator> world() const;
};

// A failure on one rank ends the whole job (DESIGN.md §5): prints "[rank r] error: <message>" to
// stderr and aborts every rank with `exit_code` (MPI_Abort). Without MPI it exits the process.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

}  // namespace weft::comm
