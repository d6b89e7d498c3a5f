#pragma once
// Calling a backend op (kernels/backend.h) from a test with typed buffers: act_op passes every
// BF16 pointer argument as the backend's Act (the tests know the backend is a BF16Mixed one) and
// every other argument (fp32 statistics, gradients, sizes) unchanged, then calls the op through
// the Backend interface, as the model does.
//   act_op(&kernels::Backend::linear_forward, *backend, out, nullptr, x, w, b, N, IC, OC);

#include <type_traits>
#include <utility>

#include "weft/core/dtype.h"
#include "weft/kernels/backend.h"

namespace weft::test {

template <typename X>
decltype(auto) as_act(X&& x) {
  using D = std::decay_t<X>;
  if constexpr (std::is_same_v<D, BF16*>) {
    return reinterpret_cast<kernels::Act*>(x);
  } else if constexpr (std::is_same_v<D, const BF16*>) {
    return reinterpret_cast<const kernels::Act*>(x);
  } else {
    return std::forward<X>(x);
  }
}

template <typename Op, typename... Args>
decltype(auto) act_op(Op op, kernels::Backend& backend, Args&&... args) {
  return (backend.*op)(as_act(std::forward<Args>(args))...);
}

}  // namespace weft::test
