#pragma once
// This node as a job sees it: its cores and how many of the job's processes share them, from the
// launcher's environment (Open MPI's mpirun, Slurm's srun). The trainer's default thread count,
// the launch gate's memory per process and `weft tune` all divide the node by the same count.

namespace weft {

// Processes of this job on this node: OMPI_COMM_WORLD_LOCAL_SIZE (mpirun), else
// SLURM_NTASKS_PER_NODE (srun, when every node has the same count), else `fallback`.
int local_processes(int fallback);

// The node's cores (std::thread::hardware_concurrency, at least 1).
int node_cores();

// Kernel threads for a process when the run does not say: the node's cores shared by `local`
// processes, at least 1.
int threads_per_process(int local);

}  // namespace weft
