#pragma once
// What the kinds of the communicator contract's tests (conformance.h) on the communicators of
// comm/cuda share: device buffers, and where NCCL's contract differs.

#include <algorithm>
#include <cstddef>

#include "comm/conformance.h"
#include "weft/kernels/cuda/arena.h"

namespace weft::comm::test {

// One arena on the current device per rank's run, copied to and from synchronously.
class DeviceMemory final : public Memory {
 public:
  DeviceMemory() : arena_(size_t{256} << 20) {}

 protected:
  void* allocate(size_t bytes) override { return arena_.allocate(std::max<size_t>(bytes, 1)); }
  void upload(void* dst, const void* src, size_t bytes) override {
    kernels::cuda::copy_to_device(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    kernels::cuda::copy_to_host(dst, src, bytes);
  }

 private:
  kernels::cuda::Arena arena_;
};

// NCCL matches messages by order (not tag), reduce-scatters in place at this rank's own block,
// and a negative split color joins no group (comm/cuda/nccl_communicator.h).
inline void follow_nccl_contract(Kind& k) {
  k.tagged_messages = false;
  k.reduce_scatter_in_place_at_own_block = true;
  k.negative_color_joins_no_group = true;
}

}  // namespace weft::comm::test
