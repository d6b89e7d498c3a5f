#pragma once
// What the kernels that are more than one launch need, passed in explicitly (no global handle,
// DESIGN.md §1.2): a cuBLASLt handle with its workspace, a scratch area for multi-pass kernels'
// intermediate results (weight-gradient partial sums, reduction partials, embedding-backward
// plans, attention-backward row sums) and the stream all of them are launched on. One Context per
// stream; it is not thread-safe. Memory comes from the process's Arena.

#include <cstddef>
#include <memory>

#include "weft/kernels/cuda/arena.h"

namespace weft::kernels::cuda {

class Context {
 public:
  static constexpr size_t kDefaultWorkspace = size_t{32} << 20;  // cuBLAS's advice for Hopper
  static constexpr size_t kDefaultScratch = size_t{64} << 20;

  explicit Context(Arena& arena, Stream stream = nullptr,
                   size_t workspace_bytes = kDefaultWorkspace,
                   size_t scratch_bytes = kDefaultScratch);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Stream stream() const;
  // The scratch area, checked to hold `bytes`. What a kernel leaves there is overwritten by the
  // next kernel of this context that uses scratch; stream order makes the reuse safe.
  void* scratch(size_t bytes) const;
  size_t scratch_bytes() const;

  struct Impl;  // the cuBLASLt state (linear.cc)
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::kernels::cuda
