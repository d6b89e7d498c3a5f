#pragma once
// Resident memory of this process, as the kernel counts it.

#include <cstdint>

namespace weft {

int64_t peak_resident_bytes();     // VmHWM: high-water mark of resident memory
int64_t current_resident_bytes();  // VmRSS

}  // namespace weft
