#pragma once
// The processes a command runs as: MPI's world when mpirun started it (MPI_Init now, MPI_Finalize
// when this object goes), else none: one process, world() == nullptr.

#include <memory>
#include <optional>

#include "weft/comm/mpi_communicator.h"

namespace weft::cli {

class JobWorld {
 public:
  explicit JobWorld(bool use_mpi = comm::launched_by_mpi()) {
    if (!use_mpi) return;
    mpi_.emplace(/*roll_call=*/true);  // a timeout ends the job: name who did not arrive
    world_ = mpi_->world();
  }
  comm::Communicator* world() const { return world_.get(); }

 private:
  std::optional<comm::MpiSession> mpi_;  // declared first: finalized after world_ is freed
  std::unique_ptr<comm::Communicator> world_;
};

}  // namespace weft::cli
