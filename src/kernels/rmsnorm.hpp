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

namespace detail {

// RMSNorm of the rows of src into out, rstd; with `a` non-empty, src is first written as a + b
// (rounded to Real, what residual_forward stores). Every RMSNorm forward is this kernel, so a row
// normalised after the fused residual has the bits of one normalised on its own.
template <class Real>
void rmsnorm_rows(const ExecSpace& space, const char* label, Vec<Real> out, Vec<accum_t<Real>> rstd, Vec<Real> src_out,
                  CVec<Real> src, CVec<Real> a, CVec<Real> b, CVec<Real> weight, int N, int C, double eps) {
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const A eps_a = A(eps);
  const bool add = a.data() != nullptr;
  Kokkos::parallel_for(
      label, team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * C;
        if (add) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C),
                               [&](int c) { src_out(row + c) = Real(A(a(row + c)) + A(b(row + c))); });
          team.team_barrier();
        }
        A sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](int c, A& acc) {
              const A x = src(row + c);
              acc += x * x;
            },
            sq);
        const A s = A(1) / kmath::sqrt(sq / C + eps_a);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C),
                             [&](int c) { out(row + c) = Real(A(src(row + c)) * s * A(weight(c))); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd(n) = s; });
      });
}

// Row n's input gradient (one team), added to dinp: each(c) then runs for column c, for the column sums of a
// fused kernel.
template <class Real, class Team, class Each>
KOKKOS_INLINE_FUNCTION void rmsnorm_row_backward(const Team& team, long n, int C, Vec<Real> dinp, CVec<Real> dout,
                                                 CVec<Real> inp, CVec<Real> weight, accum_t<Real> s, Each each) {
  using A = accum_t<Real>;
  const long row = n * C;
  A gx_sum = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, C),
      [&](int c, A& acc) { acc += A(dout(row + c)) * A(weight(c)) * A(inp(row + c)) * s; }, gx_sum);
  const A gx_mean = gx_sum / C;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
    const A xhat = A(inp(row + c)) * s;
    dinp(row + c) = Real(A(dinp(row + c)) + s * (A(dout(row + c)) * A(weight(c)) - xhat * gx_mean));
    each(c);
  });
}

}  // namespace detail

// out [N*C] and rstd [N] are written.
template <class Real>
void rmsnorm_forward(const ExecSpace& space, Vec<Real> out, Vec<accum_t<Real>> rstd,
                     CVec<std::type_identity_t<Real>> inp, CVec<std::type_identity_t<Real>> weight, int N, int C,
                     double eps) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  detail::rmsnorm_rows<Real>(space, "meshtrain::rmsnorm::forward", out, rstd, Vec<Real>(), inp, CVec<Real>(),
                             CVec<Real>(), weight, N, C, eps);
}

// The residual connection and the RMSNorm after it, in one kernel: residual = a + b, then out, rstd
// = RMSNorm(residual), bitwise what residual_forward and rmsnorm_forward compute one after the
// other. residual may be the memory of a (not of b).
template <class Real>
void residual_rmsnorm_forward(const ExecSpace& space, Vec<Real> residual, Vec<Real> out, Vec<accum_t<Real>> rstd,
                              CVec<std::type_identity_t<Real>> a, CVec<std::type_identity_t<Real>> b,
                              CVec<std::type_identity_t<Real>> weight, int N, int C, double eps) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  detail::rmsnorm_rows<Real>(space, "meshtrain::rmsnorm::residual_forward", out, rstd, residual, CVec<Real>(residual),
                             a, b, weight, N, C, eps);
}

// dinp [N*C] and dweight [C] accumulate (+=). rstd is the forward's. dinp may not alias inp.
// partials holds column_sum_workspace(N, C) elements (kernels/column_sum.hpp). One team per chunk
// of rows computes each row's input gradient and adds its weight-gradient terms
// (row_sweep_column_sums: the order, and so the bits, of column_sums); its last team combines the
// chunks: one launch.
template <class Real>
void rmsnorm_backward(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight,
                      Vec<accum_t<std::type_identity_t<Real>>> partials, CVec<std::type_identity_t<Real>> dout,
                      CVec<std::type_identity_t<Real>> inp, CVec<std::type_identity_t<Real>> weight,
                      CVec<accum_t<std::type_identity_t<Real>>> rstd, int N, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  row_sweep_column_sums<1, Real>(
      space, "meshtrain::rmsnorm::backward", {dweight}, partials, N, C,
      KOKKOS_LAMBDA(const Team& team, long n, const ColumnSumsOfRows<1, Real>& sums) {
        detail::rmsnorm_row_backward<Real>(team, n, C, dinp, dout, inp, weight, rstd(n), [&](int c) {
          sums(0, c) += A(dout(n * C + c)) * A(inp(n * C + c)) * rstd(n);
        });
      });
}

// The two halves of rmsnorm_backward, for schedules that run a backward's weight gradients later than its
// input gradient (zero-bubble pipelines): dinp alone (+=, one team per row), and dweight (+=) as column sums
// of the same terms in the same order as rmsnorm_backward's (kernels/column_sum.hpp), so bitwise its;
// partials holds column_sum_workspace(N, C) elements.
template <class Real>
void rmsnorm_input_backward(const ExecSpace& space, Vec<Real> dinp, CVec<std::type_identity_t<Real>> dout,
                            CVec<std::type_identity_t<Real>> inp, CVec<std::type_identity_t<Real>> weight,
                            CVec<accum_t<std::type_identity_t<Real>>> rstd, int N, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  // The fused kernel's team size (core/exec.hpp team_policy): the row's sums in its order, its bits.
  Kokkos::parallel_for(
      "meshtrain::rmsnorm::input_backward", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const long n = team.league_rank();
        detail::rmsnorm_row_backward<Real>(team, n, C, dinp, dout, inp, weight, rstd(n), [](int) {});
      });
}

template <class Real>
void rmsnorm_weight_backward(const ExecSpace& space, Vec<Real> dweight,
                             Vec<accum_t<std::type_identity_t<Real>>> partials, CVec<std::type_identity_t<Real>> dout,
                             CVec<std::type_identity_t<Real>> inp, CVec<accum_t<std::type_identity_t<Real>>> rstd,
                             int N, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  column_sums<1, Real>(
      space, "meshtrain::rmsnorm::weight_backward", {dweight}, partials, N, C,
      KOKKOS_LAMBDA(long n, int c) { return Kokkos::Array<A, 1>{A(dout(n * C + c)) * A(inp(n * C + c)) * rstd(n)}; });
}

}  // namespace meshtrain
