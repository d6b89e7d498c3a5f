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
// Bytes this process could still allocate without swapping: the kernel's MemAvailable, or less
// when a cgroup (a Slurm job, a container) limits memory below it. -1 where neither is readable.
int64_t available_memory_bytes();

}  // namespace weft
