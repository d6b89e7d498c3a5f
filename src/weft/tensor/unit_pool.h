#pragma once
// Buffers for the parameter units a ZeRO-2/3 rank holds only while it uses them
// (optim/distributed_optimizer.h): a unit's full gradients from its first write in a backward
// pass until their reduce-scatter completes, and under ZeRO-3 its gathered parameters from
// gather to release. A released buffer is kept and handed to the next unit of the same size, so
// after the first step nothing is allocated, mapped or faulted in again.
//
// Why a pool and not the pages of a buffer with the whole layout, returned to the OS after each
// use: on this machine that cost a page fault per 4 KiB (twice where the first touch reads) on
// every use: ZeRO-2 took 1.51x the ZeRO-0 step at dp=2 on pipe-8l, 1.28x with the pool
// (bench/zero/run.sh; docs/parallelism.md). A device allocator has no pages to return either.
// What a pool keeps resident is, per size, the most buffers in use at once: the memory model
// counts that (model/memory.cc).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "weft/tensor/aligned_buffer.h"

namespace weft {

class UnitPool {
 public:
  // A buffer of n floats: the most recently released one of that size (likely still in cache), or
  // a new one. Zeroed when `zeroed` (gradients accumulate into it); otherwise its contents are
  // whatever the last user left (parameters are overwritten whole by their all-gather).
  float* acquire(int64_t n, bool zeroed);
  // Gives back a buffer acquire() returned.
  void release(float* p);

 private:
  struct Slot {
    AlignedBuffer<float> buf;  // Pages::Huge
    bool in_use = false;
  };
  std::vector<Slot> slots_;
  std::vector<size_t> free_;  // indices into slots_, most recently released last
};

}  // namespace weft
