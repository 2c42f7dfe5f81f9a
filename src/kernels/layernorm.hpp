// LayerNorm over the channels of each row, as torch.nn.LayerNorm (biased variance, eps 1e-5).
//
// Sizes: N rows (= B*T), C channels.
//   forward:  mean[n] = Σ_c x[n,c] / C,  rstd[n] = 1 / sqrt(Σ_c (x[n,c] − mean[n])² / C + eps)
//             out[n,c] = (x[n,c] − mean[n]) · rstd[n] · weight[c] + bias[c]
//   backward: with x̂ = (x − mean)·rstd and g = dout ⊙ weight,
//             dinp[n,:] += rstd[n] · (g − mean_c(g) − x̂ · mean_c(g ⊙ x̂))
//             dweight[c] += Σ_n dout[n,c] · x̂[n,c],  dbias[c] += Σ_n dout[n,c]
//
// Row statistics are team reductions, one team per row. The parameter gradients are column sums over
// the rows (kernels/column_sum.hpp: chunks of rows, partial sums added in a fixed order, no atomics,
// bitwise the same on every backend), in accum_t<Real>, rounded to Real once at the end.
//
// Everything is computed in accum_t<Real> (float for bf16/fp16); mean and rstd are stored in it too,
// since the backward needs them to more digits than a 16-bit type holds.
#pragma once

#include "core/exec.hpp"
#include "kernels/column_sum.hpp"

#include <type_traits>

namespace meshtrain {

inline constexpr double kLayerNormEps = 1e-5;

namespace detail {

// LayerNorm of the rows of src into out, mean, rstd; with `a` non-empty, src is first written as
// a + (b + b_bias) (each sum rounded to Real: what separate bias and residual kernels store), b_bias
// optional. Every LayerNorm forward is this kernel, so a row normalised after the fused residual has
// the bits of one normalised on its own (the recomputation of a block relies on that).
template <class Real>
void layernorm_rows(const ExecSpace& space, const char* label, Vec<Real> out, Vec<accum_t<Real>> mean,
                    Vec<accum_t<Real>> rstd, Vec<Real> src_out, CVec<Real> src, CVec<Real> a, CVec<Real> b,
                    CVec<Real> b_bias, CVec<Real> weight, CVec<Real> bias, int N, int C) {
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const bool add = a.data() != nullptr, add_bias = b_bias.data() != nullptr;
  Kokkos::parallel_for(
      label, team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * C;
        if (add) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
            const Real y = add_bias ? Real(A(b(row + c)) + A(b_bias(c))) : b(row + c);
            src_out(row + c) = Real(A(a(row + c)) + A(y));
          });
          team.team_barrier();
        }
        A sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C), [&](int c, A& acc) { acc += A(src(row + c)); }, sum);
        const A m = sum / C;
        A sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](int c, A& acc) {
              const A d = A(src(row + c)) - m;
              acc += d * d;
            },
            sq);
        const A s = A(1) / kmath::sqrt(sq / C + A(kLayerNormEps));
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          out(row + c) = Real((A(src(row + c)) - m) * s * A(weight(c)) + A(bias(c)));
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          mean(n) = m;
          rstd(n) = s;
        });
      });
}

}  // namespace detail

template <class Real>
void layernorm_forward(const ExecSpace& space, Vec<Real> out, Vec<accum_t<Real>> mean, Vec<accum_t<Real>> rstd,
                       CVec<std::type_identity_t<Real>> inp, CVec<std::type_identity_t<Real>> weight,
                       CVec<std::type_identity_t<Real>> bias, int N, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  detail::layernorm_rows<Real>(space, "meshtrain::layernorm::forward", out, mean, rstd, Vec<Real>(), inp, CVec<Real>(),
                               CVec<Real>(), CVec<Real>(), weight, bias, N, C);
}

// The residual connection and the LayerNorm after it, in one kernel:
//   residual = a + (b + b_bias)   (b_bias [C] may be empty: residual = a + b)
//   out, mean, rstd = LayerNorm(residual)
// bitwise what add_bias, residual_forward and layernorm_forward compute one after the other
// (kernels/bias.hpp, residual.hpp). residual may be the memory of a (not of b).
template <class Real>
void residual_layernorm_forward(const ExecSpace& space, Vec<Real> residual, Vec<Real> out, Vec<accum_t<Real>> mean,
                                Vec<accum_t<Real>> rstd, CVec<std::type_identity_t<Real>> a,
                                CVec<std::type_identity_t<Real>> b, CVec<std::type_identity_t<Real>> b_bias,
                                CVec<std::type_identity_t<Real>> weight, CVec<std::type_identity_t<Real>> bias, int N,
                                int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  detail::layernorm_rows<Real>(space, "meshtrain::layernorm::residual_forward", out, mean, rstd, residual,
                               CVec<Real>(residual), a, b, b_bias, weight, bias, N, C);
}

namespace detail {

// Row n's input gradient (one team), added to dinp: each(c, dx) then sees column c's new value, for the column
// sums of a fused kernel.
template <class Real, class Team, class Each>
KOKKOS_INLINE_FUNCTION void layernorm_row_backward(const Team& team, long n, int C, Vec<Real> dinp, CVec<Real> dout,
                                                   CVec<Real> inp, CVec<Real> weight, accum_t<Real> m, accum_t<Real> s,
                                                   Each each) {
  using A = accum_t<Real>;
  const long row = n * C;
  A g_sum = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, C), [&](int c, A& acc) { acc += A(dout(row + c)) * A(weight(c)); }, g_sum);
  A gx_sum = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, C),
      [&](int c, A& acc) { acc += A(dout(row + c)) * A(weight(c)) * (A(inp(row + c)) - m) * s; }, gx_sum);
  const A g_mean = g_sum / C;
  const A gx_mean = gx_sum / C;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
    const A xhat = (A(inp(row + c)) - m) * s;
    const Real dx = Real(A(dinp(row + c)) + s * (A(dout(row + c)) * A(weight(c)) - g_mean - xhat * gx_mean));
    dinp(row + c) = dx;
    each(c, dx);
  });
}

// S = 2: the weight's and the bias's sums; S = 3 adds the column sums of dinp as updated.
template <int S, class Real>
void layernorm_backward_sweep(const ExecSpace& space, Vec<Real> dinp, Kokkos::Array<Vec<Real>, S> grads,
                              Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp, CVec<Real> weight,
                              CVec<accum_t<Real>> mean, CVec<accum_t<Real>> rstd, int N, int C) {
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  row_sweep_column_sums<S, Real>(
      space, "meshtrain::layernorm::backward", grads, partials, N, C,
      KOKKOS_LAMBDA(const Team& team, long n, const ColumnSumsOfRows<S, Real>& sums) {
        layernorm_row_backward<Real>(team, n, C, dinp, dout, inp, weight, mean(n), rstd(n), [&](int c, Real dx) {
          const A d = dout(n * C + c);
          sums(0, c) += d * (A(inp(n * C + c)) - mean(n)) * rstd(n);
          sums(1, c) += d;
          if constexpr (S == 3) sums(2, c) += A(dx);
        });
      });
}

}  // namespace detail

// dinp, dweight and dbias accumulate (+=); partials holds column_sum_workspace(N, C, 2) elements
// (3 with residual_bias). dinp may not be the memory of dout or inp. One team per chunk of rows
// computes each row's input gradient and adds its terms to the parameter sums
// (row_sweep_column_sums: the order, and so the bits, of column_sums); its last team combines the
// chunks: one launch. residual_bias (optional, [C]) accumulates the column sums of dinp as this backward
// leaves it: the bias gradient of the linear layer whose output joined the residual stream that
// dinp is the gradient of (GPT-2's c_proj), bitwise bias_backward(residual_bias, dinp) run after.
template <class Real>
void layernorm_backward(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight, Vec<Real> dbias,
                        Vec<accum_t<std::type_identity_t<Real>>> partials, CVec<std::type_identity_t<Real>> dout,
                        CVec<std::type_identity_t<Real>> inp, CVec<std::type_identity_t<Real>> weight,
                        CVec<accum_t<std::type_identity_t<Real>>> mean, CVec<accum_t<std::type_identity_t<Real>>> rstd,
                        int N, int C, Vec<Real> residual_bias = {}) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  if (residual_bias.data() != nullptr) {
    detail::layernorm_backward_sweep<3, Real>(space, dinp, {dweight, dbias, residual_bias}, partials, dout, inp, weight,
                                              mean, rstd, N, C);
  } else {
    detail::layernorm_backward_sweep<2, Real>(space, dinp, {dweight, dbias}, partials, dout, inp, weight, mean, rstd, N,
                                              C);
  }
}

// The two halves of layernorm_backward, for schedules that run a backward's weight gradients later than its
// input gradient (zero-bubble pipelines): dinp alone (+=, one team per row), and dweight, dbias (+=) as
// column sums of the same terms in the same order as layernorm_backward's (kernels/column_sum.hpp), so
// bitwise its; partials holds column_sum_workspace(N, C, 2) elements.
template <class Real>
void layernorm_input_backward(const ExecSpace& space, Vec<Real> dinp, CVec<std::type_identity_t<Real>> dout,
                              CVec<std::type_identity_t<Real>> inp, CVec<std::type_identity_t<Real>> weight,
                              CVec<accum_t<std::type_identity_t<Real>>> mean,
                              CVec<accum_t<std::type_identity_t<Real>>> rstd, int N, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  // The fused kernel's team size (core/exec.hpp team_policy): the row's sums in its order, its bits.
  Kokkos::parallel_for(
      "meshtrain::layernorm::input_backward", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const long n = team.league_rank();
        detail::layernorm_row_backward<Real>(team, n, C, dinp, dout, inp, weight, mean(n), rstd(n), [](int, Real) {});
      });
}

template <class Real>
void layernorm_weight_backward(const ExecSpace& space, Vec<Real> dweight, Vec<Real> dbias,
                               Vec<accum_t<std::type_identity_t<Real>>> partials, CVec<std::type_identity_t<Real>> dout,
                               CVec<std::type_identity_t<Real>> inp, CVec<accum_t<std::type_identity_t<Real>>> mean,
                               CVec<accum_t<std::type_identity_t<Real>>> rstd, int N, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  column_sums<2, Real>(
      space, "meshtrain::layernorm::weight_backward", {dweight, dbias}, partials, N, C, KOKKOS_LAMBDA(long n, int c) {
        const A d = dout(n * C + c);
        return Kokkos::Array<A, 2>{d * (A(inp(n * C + c)) - mean(n)) * rstd(n), d};
      });
}

}  // namespace meshtrain
