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
// glibc's mmap threshold a host process of weft runs with: a malloc of this size or more is mapped
// and unmapped per call, a smaller one comes from the heap (where its pages stay after free). The
// default threshold is dynamic: freeing a mapped block raises it to that block's size (up to 32
// MiB), so which temporaries stay resident depended on what the process had freed before. In one
// process running trial after trial (`weft tune`), oneDNN's per-call packing buffers (1.2-4.6 MB)
// then landed on heap pages earlier trials had left in fragments, and a layout measured up to 18
// MiB above a fresh process (docs/planner.md §12). Fixed, every process holds what a fresh one
// does, and the memory model counts one rule (model/memory.cc). An interleaved A/B (2026-12-03,
// 2 ranks, 16 layouts x 3 grids each way) measured the steps 0.6% slower on their fastest trial.
inline constexpr int64_t kMmapThresholdBytes = int64_t{1} << 20;
// Sets kMmapThresholdBytes as glibc's mmap threshold (mallopt), which also ends its dynamic
// adjustment, and the trim threshold to glibc's default. Heap already free still serves a larger
// request. Idempotent; a no-op without glibc. The host backends call it when made.
void fix_mmap_threshold();
// Bytes this process could still allocate without swapping: the kernel's MemAvailable, or less
// when a cgroup (a Slurm job, a container) limits memory below it. -1 where neither is readable.
int64_t available_memory_bytes();

}  // namespace weft
