#pragma once
// A Communicator whose ranks are threads of one process (host memory). It exists so the parallel
// equivalence checks can run where there is no MPI (the borrowed GPU machine has no mpirun): the
// test starts n threads and gives thread r element r of make_thread_communicators(n).
//
// Semantics follow the MPI backend (mpi_communicator.cc): the same ops, in-place rules, errors
// and timeout messages. Each rank's communicator is used by one thread only, and every rank calls
// the group's collectives in the same order (they are matched by call order, and a rank whose
// call differs in op, count, type, reduction or root makes every rank of that collective throw).
// Differences worth knowing:
//  - Collectives are blocking: *_async returns an already complete Work.
//  - Sends are eager: send_async copies the data and completes at once, never waiting for the
//    receiver. A receive is matched in the order receives were posted, per (source, tag), and a
//    message longer than the receive buffer is an error (MPI's truncation); a shorter one is not.
//  - Sending to oneself is allowed (as in MPI).
//  - A collective that times out leaves its group unusable: that rank's peers, waiting or
//    arriving later, throw an error that names it (with MPI the job would be aborted). Point-to-
//    point messages on the group still work.
//  - Sums add the ranks' values in rank order (0, 1, ...), so results are deterministic.

#include <memory>
#include <string>
#include <vector>

#include "weft/comm/communicator.h"

namespace weft::comm {

// n ranks that are threads of this process: element r is rank r's communicator, to be used by one
// thread only (each rank calls its collectives in the same order, as with MPI). Host memory.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(
    int n, const std::string& name = "world");

}  // namespace weft::comm
