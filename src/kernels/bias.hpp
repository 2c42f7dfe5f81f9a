// Bias of a linear layer, kept apart from the GEMM that computes x·W.
//
// Sizes: N rows (= B*T), OC output channels.
//   add_bias:      out[n,o] += bias[o]
//   bias_backward: dbias[o] += Σ_n dout[n,o]
//
// The column sums run without atomics: teams own blocks of columns and walk the rows in order, so
// the sum has the same order on every run and backend, and on the host each row contributes one
// contiguous run of the block. They accumulate in team scratch in accum_t<Real> (float for 16-bit
// Real) and are rounded to Real once.
#pragma once

#include "core/exec.hpp"

#include <type_traits>

namespace meshtrain {

// Columns per team in bias_backward.
inline constexpr int kBiasColumnBlock = 64;

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

// dbias accumulates (+=).
template <class Real>
void bias_backward(const ExecSpace& space, Vec<Real> dbias, CVec<std::type_identity_t<Real>> dout, int N, int OC) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Scratch = Kokkos::View<A*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const int blocks = (OC + kBiasColumnBlock - 1) / kBiasColumnBlock;
  Kokkos::parallel_for(
      "meshtrain::bias::backward",
      team_policy(space, blocks).set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(kBiasColumnBlock))),
      KOKKOS_LAMBDA(const Team& team) {
        const int o0 = team.league_rank() * kBiasColumnBlock;
        const int o1 = o0 + kBiasColumnBlock < OC ? o0 + kBiasColumnBlock : OC;
        Scratch sum(team.team_scratch(0), kBiasColumnBlock);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, o0, o1), [&](int o) { sum(o - o0) = dbias(o); });
        team.team_barrier();
        for (int n = 0; n < N; ++n) {
          const long row = static_cast<long>(n) * OC;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, o0, o1), [&](int o) { sum(o - o0) += A(dout(row + o)); });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, o0, o1), [&](int o) { dbias(o) = Real(sum(o - o0)); });
      });
}

}  // namespace meshtrain
