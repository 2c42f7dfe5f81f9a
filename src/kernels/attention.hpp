// Causal multi-head self-attention on the fused qkv projection. Both products are GEMMs.
//
// Sizes: B batch, T time, C channels, NH heads, hs = C/NH head size.
//   qkv [B,T,3C]: columns q | k | v; inside each, head h owns columns h*hs .. h*hs+hs-1, so head h
//   of q is a T×hs matrix with row stride 3C starting at column h*hs (k: C + h*hs, v: 2C + h*hs).
//   att [B,NH,T,T]: softmax probabilities P, zero above the diagonal (future positions).
//   out [B,T,C]: head h writes columns h*hs .. h*hs+hs-1.
//
//   forward:  S_h = scale · Q_h K_hᵀ,  P_h = causal_softmax(S_h),  O_h = P_h V_h,  scale =
//   1/sqrt(hs) backward: dP_h = dO_h V_hᵀ,  dV_h = P_hᵀ dO_h,  dS_h = P_h ⊙ (dP_h − rowsum(P_h ⊙
//   dP_h)),
//             dQ_h = scale · dS_h K_h,  dK_h = scale · dS_hᵀ Q_h
//
// 16-bit Real: the GEMMs accumulate in float (kernels/gemm.hpp) and P, dS are stored rounded.
//
// Each product runs as one strided-batched GEMM per sequence, batched over heads (a head's
// matrices sit hs columns after the previous head's), so no permutation copies are made. The
// GEMMs compute the full T×T scores; the softmax kernels apply the causal mask.
#pragma once

#include "core/exec.hpp"
#include "kernels/fast_math.hpp"
#include "kernels/gemm.hpp"

#include <cmath>
#include <type_traits>

namespace meshtrain {

namespace detail {

// Softmax over row t of every T×T score matrix, in place: columns j ≤ t, the rest set to 0.
// rows = B*NH*T, one team per row. In float and double the exponentials are kept in att between
// the sum and the normalisation; a 16-bit att would round them twice, so there they are
// recomputed (the same float values) and rounded once, normalised.
template <class Real>
void causal_softmax_forward(const ExecSpace& space, Vec<Real> att, int rows, int T) {
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::attention::softmax_forward", team_policy(space, rows), KOKKOS_LAMBDA(const Team& team) {
        const int r = team.league_rank();
        const int t = r % T;
        const long row = static_cast<long>(r) * T;
        A row_max;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, t + 1),
            [&](int j, A& m) {
              if (A(att(row + j)) > m) m = att(row + j);
            },
            Kokkos::Max<A>(row_max));
        A sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, t + 1),
            [&](int j, A& acc) {
              const A e = fast_exp(A(att(row + j)) - row_max);
              if constexpr (!is_low_precision_v<Real>) att(row + j) = e;
              acc += e;
            },
            sum);
        team.team_barrier();
        const A inv = A(1) / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, T), [&](int j) {
          if constexpr (is_low_precision_v<Real>) {
            att(row + j) = Real(j <= t ? fast_exp(A(att(row + j)) - row_max) * inv : A(0));
          } else {
            att(row + j) = j <= t ? att(row + j) * inv : Real(0);
          }
        });
      });
}

// datt ← P ⊙ (datt − rowsum(P ⊙ datt)) over columns j ≤ t of each row, 0 above; in place.
template <class Real>
void causal_softmax_backward(const ExecSpace& space, Vec<Real> datt, CVec<Real> att, int rows, int T) {
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::attention::softmax_backward", team_policy(space, rows), KOKKOS_LAMBDA(const Team& team) {
        const int r = team.league_rank();
        const int t = r % T;
        const long row = static_cast<long>(r) * T;
        A dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, t + 1), [&](int j, A& acc) { acc += A(att(row + j)) * A(datt(row + j)); },
            dot);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, T), [&](int j) {
          datt(row + j) = Real(j <= t ? A(att(row + j)) * (A(datt(row + j)) - dot) : A(0));
        });
      });
}

}  // namespace detail

// att [B*NH*T*T] ← P_h = causal_softmax(scale · Q_h K_hᵀ), the first half of attention_forward; on
// its own it recomputes the probabilities for backward (selective recomputation), bit for bit.
template <class Real>
void attention_probabilities(const ExecSpace& space, Vec<Real> att, CVec<std::type_identity_t<Real>> qkv, int B, int T,
                             int C, int NH) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  const int hs = C / NH;
  const int C3 = 3 * C;
  const accum_t<Real> scale = accum_t<Real>(1.0 / std::sqrt(static_cast<double>(hs)));
  const long seq_qkv = static_cast<long>(T) * C3;
  const long seq_att = static_cast<long>(NH) * T * T;
  const long tt = static_cast<long>(T) * T;

  // S_h = scale · Q_h K_hᵀ, for every head of every sequence.
  for (int b = 0; b < B; ++b) {
    const Real* q = qkv.data() + b * seq_qkv;
    gemm_strided_batched<Real>(space, Trans::no, Trans::yes, GemmShape{T, T, hs}, scale, q, C3, hs, q + C, C3, hs,
                               accum_t<Real>(0), att.data() + b * seq_att, T, tt, NH);
  }
  detail::causal_softmax_forward<Real>(space, att, B * NH * T, T);
}

// out [B*T*C] and att [B*NH*T*T] are written. qkv is [B*T*3C].
template <class Real>
void attention_forward(const ExecSpace& space, Vec<Real> out, Vec<Real> att, CVec<std::type_identity_t<Real>> qkv,
                       int B, int T, int C, int NH) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  const int hs = C / NH;
  const int C3 = 3 * C;
  const long seq_qkv = static_cast<long>(T) * C3;
  const long seq_att = static_cast<long>(NH) * T * T;
  const long tt = static_cast<long>(T) * T;

  attention_probabilities<Real>(space, att, qkv, B, T, C, NH);
  // O_h = P_h V_h, written into the head's columns of out.
  for (int b = 0; b < B; ++b) {
    const Real* v = qkv.data() + b * seq_qkv + 2 * C;
    gemm_strided_batched<Real>(space, Trans::no, Trans::no, GemmShape{T, hs, T}, accum_t<Real>(1),
                               att.data() + b * seq_att, T, tt, v, C3, hs, accum_t<Real>(0),
                               out.data() + static_cast<long>(b) * T * C, C, hs, NH);
  }
}

// dqkv [B*T*3C] is written (=), every column. datt [B*NH*T*T] is scratch (holds dS afterwards).
// att is the forward's P. No argument may share memory with another.
template <class Real>
void attention_backward(const ExecSpace& space, Vec<Real> dqkv, Vec<Real> datt, CVec<std::type_identity_t<Real>> dout,
                        CVec<std::type_identity_t<Real>> qkv, CVec<std::type_identity_t<Real>> att, int B, int T, int C,
                        int NH) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  const int hs = C / NH;
  const int C3 = 3 * C;
  const accum_t<Real> scale = accum_t<Real>(1.0 / std::sqrt(static_cast<double>(hs)));
  const long seq_qkv = static_cast<long>(T) * C3;
  const long seq_out = static_cast<long>(T) * C;
  const long seq_att = static_cast<long>(NH) * T * T;
  const long tt = static_cast<long>(T) * T;

  for (int b = 0; b < B; ++b) {
    const Real* v = qkv.data() + b * seq_qkv + 2 * C;
    const Real* dout_b = dout.data() + b * seq_out;
    const Real* att_b = att.data() + b * seq_att;
    // dP_h = dO_h V_hᵀ
    gemm_strided_batched<Real>(space, Trans::no, Trans::yes, GemmShape{T, T, hs}, accum_t<Real>(1), dout_b, C, hs, v,
                               C3, hs, accum_t<Real>(0), datt.data() + b * seq_att, T, tt, NH);
    // dV_h = P_hᵀ dO_h
    gemm_strided_batched<Real>(space, Trans::yes, Trans::no, GemmShape{T, hs, T}, accum_t<Real>(1), att_b, T, tt,
                               dout_b, C, hs, accum_t<Real>(0), dqkv.data() + b * seq_qkv + 2 * C, C3, hs, NH);
  }
  detail::causal_softmax_backward<Real>(space, datt, att, B * NH * T, T);
  for (int b = 0; b < B; ++b) {
    const Real* q = qkv.data() + b * seq_qkv;
    const Real* ds = datt.data() + b * seq_att;
    Real* dq = dqkv.data() + b * seq_qkv;
    // dQ_h = scale · dS_h K_h
    gemm_strided_batched<Real>(space, Trans::no, Trans::no, GemmShape{T, hs, T}, scale, ds, T, tt, q + C, C3, hs,
                               accum_t<Real>(0), dq, C3, hs, NH);
    // dK_h = scale · dS_hᵀ Q_h
    gemm_strided_batched<Real>(space, Trans::yes, Trans::no, GemmShape{T, hs, T}, scale, ds, T, tt, q, C3, hs,
                               accum_t<Real>(0), dq + C, C3, hs, NH);
  }
}

}  // namespace meshtrain
