#include "weft/core/node.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace weft {

int local_processes(int fallback) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(var)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return fallback;
}

int node_cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

int threads_per_process(int local) { return std::max(1, node_cores() / std::max(1, local)); }

}  // namespace weft
