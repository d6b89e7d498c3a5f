// Kernel threads: one OpenMP pool, shared by weft's kernels and oneDNN (linked against libgomp).

#include <omp.h>

#include "weft/core/check.h"
#include "weft/kernels/kernels.h"

namespace weft::kernels {

void set_num_threads(int n) {
  WEFT_CHECK(n >= 1, "the number of kernel threads must be at least 1, got ", n);
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace weft::kernels
