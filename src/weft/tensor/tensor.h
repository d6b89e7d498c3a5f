#pragma once
// A non-owning view of a contiguous fp32 tensor: pointer plus shape (row-major).

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace weft {

using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

std::string shape_str(const Shape& shape);  // "[768, 2304]"

struct TensorView {
  float* data = nullptr;
  Shape shape;
  int64_t numel() const { return weft::numel(shape); }
};

}  // namespace weft
