// LayerNorm over the channels of each row, as torch.nn.LayerNorm (biased variance, eps 1e-5).
//
// Sizes: N rows (= B*T), C channels.
//   forward:  mean[n] = Σ_c x[n,c] / C,  rstd[n] = 1 / sqrt(Σ_c (x[n,c] − mean[n])² / C + eps)
//             out[n,c] = (x[n,c] − mean[n]) · rstd[n] · weight[c] + bias[c]
//   backward: with x̂ = (x − mean)·rstd and g = dout ⊙ weight,
//             dinp[n,:] += rstd[n] · (g − mean_c(g) − x̂ · mean_c(g ⊙ x̂))
//             dweight[c] += Σ_n dout[n,c] · x̂[n,c],  dbias[c] += Σ_n dout[n,c]
//
// Row statistics are team reductions, one team per row. The parameter gradients sum over rows, so
// teams own blocks of channels and walk the rows in order: no atomics, the same order every run.
#pragma once

#include "core/exec.hpp"

#include <type_traits>

namespace meshtrain {

inline constexpr double kLayerNormEps = 1e-5;
// Channels per team in the parameter-gradient sweep.
inline constexpr int kLayerNormColumnBlock = 64;

template <class Real>
void layernorm_forward(const ExecSpace& space, Vec<Real> out, Vec<Real> mean, Vec<Real> rstd,
                       CVec<std::type_identity_t<Real>> inp,
                       CVec<std::type_identity_t<Real>> weight,
                       CVec<std::type_identity_t<Real>> bias, int N, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::layernorm::forward", Kokkos::TeamPolicy<ExecSpace>(space, N, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * C;
        Real sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C), [&](int c, Real& acc) { acc += inp(row + c); }, sum);
        const Real m = sum / C;
        Real sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](int c, Real& acc) {
              const Real d = inp(row + c) - m;
              acc += d * d;
            },
            sq);
        const Real s = Real(1) / kmath::sqrt(sq / C + Real(kLayerNormEps));
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          out(row + c) = (inp(row + c) - m) * s * weight(c) + bias(c);
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          mean(n) = m;
          rstd(n) = s;
        });
      });
}

// dinp, dweight and dbias accumulate (+=).
template <class Real>
void layernorm_backward(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight, Vec<Real> dbias,
                        CVec<std::type_identity_t<Real>> dout, CVec<std::type_identity_t<Real>> inp,
                        CVec<std::type_identity_t<Real>> weight,
                        CVec<std::type_identity_t<Real>> mean,
                        CVec<std::type_identity_t<Real>> rstd, int N, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::layernorm::backward_input", Kokkos::TeamPolicy<ExecSpace>(space, N, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * C;
        const Real m = mean(n);
        const Real s = rstd(n);
        Real g_sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](int c, Real& acc) { acc += dout(row + c) * weight(c); }, g_sum);
        Real gx_sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](int c, Real& acc) { acc += dout(row + c) * weight(c) * (inp(row + c) - m) * s; },
            gx_sum);
        const Real g_mean = g_sum / C;
        const Real gx_mean = gx_sum / C;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          const Real xhat = (inp(row + c) - m) * s;
          dinp(row + c) += s * (dout(row + c) * weight(c) - g_mean - xhat * gx_mean);
        });
      });

  const int blocks = (C + kLayerNormColumnBlock - 1) / kLayerNormColumnBlock;
  Kokkos::parallel_for(
      "meshtrain::layernorm::backward_params",
      Kokkos::TeamPolicy<ExecSpace>(space, blocks, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const int c0 = team.league_rank() * kLayerNormColumnBlock;
        const int c1 = c0 + kLayerNormColumnBlock < C ? c0 + kLayerNormColumnBlock : C;
        for (int n = 0; n < N; ++n) {
          const long row = static_cast<long>(n) * C;
          const Real m = mean(n);
          const Real s = rstd(n);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1), [&](int c) {
            const Real d = dout(row + c);
            dweight(c) += d * (inp(row + c) - m) * s;
            dbias(c) += d;
          });
        }
      });
}

}  // namespace meshtrain
