// RMSNorm over the channels of each row, as LLaMA's (Hugging Face LlamaRMSNorm): no mean, no bias.
//
// Sizes: N rows (= B*T), C channels.
//   forward:  rstd[n] = 1 / sqrt(Σ_c x[n,c]² / C + eps),  out[n,c] = x[n,c] · rstd[n] · weight[c]
//   backward: with x̂ = x·rstd and g = dout ⊙ weight,
//             dinp[n,:] += rstd[n] · (g − x̂ · mean_c(g ⊙ x̂))
//             dweight[c] += Σ_n dout[n,c] · x̂[n,c]
//
// As in layernorm.hpp: one team per row for the row statistic; the weight gradient is a column sum
// (kernels/column_sum.hpp: bitwise the same on every backend), in accum_t<Real>, rounded once.
//
// Everything is computed in accum_t<Real> and rounded once at the store; rstd is stored in it. (Hugging
// Face rounds x·rstd to the model's dtype before multiplying by the weight; we round once.)
#pragma once

#include "core/exec.hpp"
#include "kernels/column_sum.hpp"

#include <type_traits>

namespace meshtrain {

// out [N*C] and rstd [N] are written.
template <class Real>
void rmsnorm_forward(const ExecSpace& space, Vec<Real> out, Vec<accum_t<Real>> rstd,
                     CVec<std::type_identity_t<Real>> inp, CVec<std::type_identity_t<Real>> weight, int N, int C,
                     double eps) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const A eps_a = A(eps);
  Kokkos::parallel_for(
      "meshtrain::rmsnorm::forward", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * C;
        A sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](int c, A& acc) {
              const A x = inp(row + c);
              acc += x * x;
            },
            sq);
        const A s = A(1) / kmath::sqrt(sq / C + eps_a);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C),
                             [&](int c) { out(row + c) = Real(A(inp(row + c)) * s * A(weight(c))); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd(n) = s; });
      });
}

// dinp [N*C] and dweight [C] accumulate (+=). rstd is the forward's. dinp may not alias inp.
// partials holds column_sum_workspace(N, C) elements (kernels/column_sum.hpp).
template <class Real>
void rmsnorm_backward(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight,
                      Vec<accum_t<std::type_identity_t<Real>>> partials, CVec<std::type_identity_t<Real>> dout,
                      CVec<std::type_identity_t<Real>> inp, CVec<std::type_identity_t<Real>> weight,
                      CVec<accum_t<std::type_identity_t<Real>>> rstd, int N, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::rmsnorm::backward_input", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * C;
        const A s = rstd(n);
        A gx_sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](int c, A& acc) { acc += A(dout(row + c)) * A(weight(c)) * A(inp(row + c)) * s; }, gx_sum);
        const A gx_mean = gx_sum / C;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          const A xhat = A(inp(row + c)) * s;
          dinp(row + c) = Real(A(dinp(row + c)) + s * (A(dout(row + c)) * A(weight(c)) - xhat * gx_mean));
        });
      });
  const int Cc = C;
  column_sums<1, Real>(
      space, "meshtrain::rmsnorm::backward_weight", {dweight}, partials, N, C,
      KOKKOS_LAMBDA(long n, int c) { return Kokkos::Array<A, 1>{A(dout(n * Cc + c)) * A(inp(n * Cc + c)) * rstd(n)}; });
}

}  // namespace meshtrain
