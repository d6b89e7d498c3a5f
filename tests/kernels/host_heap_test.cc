// A host backend fixes glibc's mmap threshold at kMmapThresholdBytes (core/memory_usage.h), the
// line model/memory.cc prices the host's heap temporaries by: a temporary of that size or more is
// mapped per call whatever the process freed before. Under glibc's dynamic threshold, freeing a 4
// MiB mapped block would raise the threshold to 4 MiB and the next 2 MiB would come from the heap.

#include <gtest/gtest.h>

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "weft/core/memory_usage.h"
#include "weft/kernels/backend.h"

namespace weft::kernels {
namespace {

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
// Whether glibc serves malloc(bytes) by a mapping of its own: mallinfo2's count of mapped blocks
// rises while the block is held.
bool malloc_maps(size_t bytes) {
  const size_t before = mallinfo2().hblks;
  void* volatile p = std::malloc(bytes);  // volatile: else the compiler drops the pair
  const size_t during = mallinfo2().hblks;
  std::free(p);
  return during > before;
}

TEST(HostHeap, MakingAHostBackendFixesGlibcsMmapThreshold) {
  // A threshold some earlier frees raised past the temporaries (as glibc's dynamic one does).
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 16 << 20), 1);
  auto backend = make_host_backend(Precision::FP32);
  malloc_trim(0);  // free heap serves a request of any size: none left at the top
  EXPECT_TRUE(malloc_maps(kMmapThresholdBytes)) << "a temporary at the threshold is mapped";
  EXPECT_FALSE(malloc_maps(kMmapThresholdBytes / 2)) << "below it, the heap";
  // Freeing a larger mapped block leaves the threshold where it is.
  void* volatile big = std::malloc(4 << 20);
  std::free(big);
  EXPECT_TRUE(malloc_maps(2 << 20));
}
#else
TEST(HostHeap, MakingAHostBackendFixesGlibcsMmapThreshold) {
  GTEST_SKIP() << "glibc's malloc only (AddressSanitizer replaces it)";
}
#endif

}  // namespace
}  // namespace weft::kernels
