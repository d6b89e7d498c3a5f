#pragma once
// The GEMM ceiling of this machine for a model: the rate (FLOP/s) at which the step's own GEMM
// shapes run in isolation, through the same sgemm the kernels use (sgemm_bf16, including its
// fp32 -> bf16 input conversion, for MatmulPrecision::BF16). MFU is reported against it as well as
// against the spec peak (DESIGN.md §7).

#include <vector>

#include "weft/kernels/kernels.h"
#include "weft/model/gemm_shapes.h"
#include "weft/tensor/aligned_buffer.h"

namespace weft::runtime {

struct GemmTiming {
  model::GemmShape shape;
  double seconds = 0;  // per call, median
  double rate() const { return 2.0 * shape.M * shape.N * shape.K / seconds; }
};

struct GemmCeiling {
  std::vector<GemmTiming> timings;
  double flops = 0;    // per step, all shapes times their counts
  double seconds = 0;  // per step if every GEMM ran at its isolated rate
  double rate() const { return flops / seconds; }
};

// Measures the ceiling of a set of shapes again and again from buffers allocated (and touched)
// once, at construction: `weft bench step` interleaves its measurements with the timed steps, and
// builds the meter before it reads the memory baseline, so the steps' measured memory holds none
// of the meter's.
class GemmCeilingMeter {
 public:
  explicit GemmCeilingMeter(std::vector<model::GemmShape> shapes);
  // Times each shape in `reps` batches of back-to-back calls (each batch >= 5 ms, after two
  // warm-up calls) and takes the median per-call time.
  GemmCeiling measure(int reps = 5,
                      kernels::MatmulPrecision precision = kernels::MatmulPrecision::F32);

 private:
  std::vector<model::GemmShape> shapes_;
  AlignedBuffer<float> a_, b_, out_;  // the largest shape's operands
};

}  // namespace weft::runtime
