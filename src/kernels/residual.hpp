// Residual connection, elementwise.
//
// Sizes: n elements (N*C for a residual stream of N rows, C channels).
//   out = a + b
#pragma once

#include "core/exec.hpp"

#include <type_traits>

namespace meshtrain {

// out may be the same memory as a or b.
template <class Real>
void residual_forward(const ExecSpace& space, Vec<Real> out, CVec<std::type_identity_t<Real>> a,
                      CVec<std::type_identity_t<Real>> b, long n) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  Kokkos::parallel_for(
      "meshtrain::residual::forward", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(long i) { out(i) = Real(accum_t<Real>(a(i)) + accum_t<Real>(b(i))); });
}

}  // namespace meshtrain
