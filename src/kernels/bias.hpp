// Bias of a linear layer, kept apart from the GEMM that computes x·W.
//
// Sizes: N rows (= B*T), OC output channels.
//   add_bias:      out[n,o] += bias[o]
//   bias_backward: dbias[o] += Σ_n dout[n,o]
//
// The column sums are kernels/column_sum.hpp's: chunks of rows over the whole device, their partial
// sums added in a fixed order, so the result is bitwise the same on every run, team size and backend.
#pragma once

#include "core/exec.hpp"
#include "kernels/column_sum.hpp"

#include <type_traits>

namespace meshtrain {

template <class Real>
void add_bias(const ExecSpace& space, Vec<Real> out, CVec<std::type_identity_t<Real>> bias, int N, int OC) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::bias::forward", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const long row = static_cast<long>(team.league_rank()) * OC;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, OC),
                             [&](int o) { out(row + o) = Real(A(out(row + o)) + A(bias(o))); });
      });
}

// dbias accumulates (+=); partials holds column_sum_workspace(N, OC) elements (kernels/column_sum.hpp).
template <class Real>
void bias_backward(const ExecSpace& space, Vec<Real> dbias, Vec<accum_t<std::type_identity_t<Real>>> partials,
                   CVec<std::type_identity_t<Real>> dout, int N, int OC) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  column_sums<1, Real>(
      space, "meshtrain::bias::backward", {dbias}, partials, N, OC,
      KOKKOS_LAMBDA(long n, int o) { return Kokkos::Array<A, 1>{A(dout(n * OC + o))}; });
}

}  // namespace meshtrain
