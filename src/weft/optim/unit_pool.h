#pragma once
// Buffers for the parameter units a ZeRO-2/3 rank holds only while it uses them
// (optim/distributed_optimizer.h), in its backend's memory: a unit's full gradients from its first
// write in a backward pass until their reduce-scatter completes, and under ZeRO-3 its gathered
// parameters (in the type the forward reads) from gather to release. A released buffer is kept
// and handed to the next unit of the same size, so after the first step nothing is allocated
// again: a device allocator (the CUDA arena) hands memory out once, and on the host this saved a
// page fault per 4 KiB on every use (ZeRO-2 took 1.51x the ZeRO-0 step at dp=2 on pipe-8l
// returning its pages, 1.28x with the pool; bench/zero/run.sh, docs/parallelism.md). What a pool
// holds is, per size, the most buffers in use at once: the memory model counts that
// (model/memory.cc).

#include <cstdint>
#include <vector>

#include "weft/kernels/backend.h"

namespace weft::optim {

class UnitPool {
 public:
  // Allocates from `backend`, which must outlive the pool.
  explicit UnitPool(kernels::Backend& backend) : backend_(backend) {}
  UnitPool(const UnitPool&) = delete;
  UnitPool& operator=(const UnitPool&) = delete;

  // A buffer of `bytes`: the most recently released one of that size (likely still in cache), or
  // a new one. Zeroed when `zeroed` (gradients accumulate into it); otherwise its contents are
  // whatever the last user left (parameters are overwritten whole by their all-gather).
  void* acquire(int64_t bytes, bool zeroed);
  // Gives back a buffer acquire() returned.
  void release(void* p);
  kernels::Backend& backend() const { return backend_; }
  // The bytes asked for of every buffer it made, in the order made (what it holds: tests compare
  // it with model::zero_pool_bytes).
  std::vector<int64_t> sizes() const;

 private:
  struct Slot {
    void* p = nullptr;
    int64_t bytes = 0;
    bool in_use = false;
  };
  kernels::Backend& backend_;
  std::vector<Slot> slots_;
  std::vector<size_t> free_;  // indices into slots_, most recently released last
};

}  // namespace weft::optim
