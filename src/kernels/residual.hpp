// Residual connection, elementwise.
//
// Sizes: n elements (N*C for a residual stream of N rows, C channels).
//   out = a + b
//   out = a + (b + bias)   (N rows of C, bias [C]: a linear layer's bias folded in, each sum rounded
//                           to Real, bitwise add_bias then residual_forward)
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

// out may be the same memory as a or b.
template <class Real>
void residual_forward(const ExecSpace& space, Vec<Real> out, CVec<std::type_identity_t<Real>> a,
                      CVec<std::type_identity_t<Real>> b, CVec<std::type_identity_t<Real>> bias, int N, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  Kokkos::parallel_for(
      "meshtrain::residual::bias_forward", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(N) * C),
      KOKKOS_LAMBDA(long i) { out(i) = Real(A(a(i)) + A(Real(A(b(i)) + A(bias(i % C))))); });
}

}  // namespace meshtrain
