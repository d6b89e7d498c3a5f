#pragma once
// Resident memory of this process, as the kernel counts it.

#include <cstdint>

namespace weft {

int64_t peak_resident_bytes();     // VmHWM: high-water mark of resident memory
int64_t current_resident_bytes();  // VmRSS
// Starts a new high-water mark at the current resident memory (Linux: "5" to
// /proc/self/clear_refs), so a burst (a checkpoint's gathering) does not mask the steady state.
// False where the kernel does not allow it.
bool reset_peak_resident();
// After a burst that is not the run's own (the GEMM ceiling's operands and oneDNN's packing buffers
// for them): hands the heap pages glibc keeps after free back to the kernel (malloc_trim; a freed
// block below the mmap threshold stays resident otherwise), then reset_peak_resident(). Take
// peak_resident_bytes() before the burst to keep the run's peak so far.
bool forget_burst();
// Bytes this process could still allocate without swapping: the kernel's MemAvailable, or less
// when a cgroup (a Slurm job, a container) limits memory below it. -1 where neither is readable.
int64_t available_memory_bytes();

}  // namespace weft
