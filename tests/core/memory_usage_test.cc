// Resident memory as the kernel counts it: touching 64 MiB shows up in the high-water mark.

#include "weft/core/memory_usage.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

namespace weft {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(MemoryUsage, ReportsPositiveResidentSizes) {
  EXPECT_GT(current_resident_bytes(), 0);
  EXPECT_GE(peak_resident_bytes(), current_resident_bytes());
}

TEST(MemoryUsage, TouchingSixtyFourMiBRaisesThePeakBySixtyFourMiB) {
  constexpr int64_t kBytes = 64 * kMiB;
  const int64_t before = current_resident_bytes();
  auto buf = std::make_unique<unsigned char[]>(kBytes);  // value-initialized: touches every page
  for (int64_t i = 0; i < kBytes; i += 4096) buf[i] = static_cast<unsigned char>(i >> 12);
  int64_t checksum = 0;
  for (int64_t i = 0; i < kBytes; i += 4096) checksum += buf[i];
  EXPECT_GT(checksum, 0);  // keeps the buffer observable
  const int64_t during = current_resident_bytes();
  const int64_t peak = peak_resident_bytes();
  // Allow 2 MiB for pages the allocator or earlier tests may return meanwhile.
  EXPECT_GE(during - before, kBytes - 2 * kMiB) << "before " << before << " during " << during;
  EXPECT_GE(peak, before + kBytes - 2 * kMiB) << "before " << before << " peak " << peak;
  buf.reset();  // returns the pages (64 MiB is mmap-backed): the high-water mark remembers them
  EXPECT_GE(peak_resident_bytes(), before + kBytes - 2 * kMiB);
}

}  // namespace
}  // namespace weft
