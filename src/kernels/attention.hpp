// Causal self-attention on the fused qkv projection, multi-head or grouped-query. Both products are GEMMs.
//
// Sizes: B batch, T time, NH query heads, KVH kv heads (KVH divides NH), hs head size; the
// multi-head overloads take C = NH·hs channels and NH (KVH = NH).
//   qkv [B,T,(NH+2KVH)·hs]: columns q (NH·hs) | k (KVH·hs) | v (KVH·hs); inside each, head h owns
//   columns h*hs .. h*hs+hs-1, so head h of q is a T×hs matrix with the row's stride starting at
//   column h*hs (kv head k of k: NH·hs + k*hs, of v: (NH+KVH)·hs + k*hs). Multi-head: [B,T,3C].
//   att [B,NH,T,T]: softmax probabilities P, zero above the diagonal (future positions).
//   out [B,T,NH·hs]: head h writes columns h*hs .. h*hs+hs-1.
//
//   forward:  S_h = scale · Q_h K_hᵀ,  P_h = causal_softmax(S_h),  O_h = P_h V_h,  scale = 1/sqrt(hs)
//   backward: dP_h = dO_h V_hᵀ,  dV_h = P_hᵀ dO_h,  dS_h = P_h ⊙ (dP_h − rowsum(P_h ⊙ dP_h)),
//             dQ_h = scale · dS_h K_h,  dK_h = scale · dS_hᵀ Q_h
//   (grouped-query: K_h, V_h are those of kv head h / (NH/KVH); see attention_probabilities below)
//
// 16-bit Real: the GEMMs accumulate in float (kernels/gemm.hpp) and P, dS are stored rounded.
//
// Each product runs as one strided GEMM batch over sequences and heads (a head's matrices sit a
// fixed number of columns after the previous one's, a sequence's a fixed number of rows), so no
// permutation copies are made. The
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

namespace detail {

// Where each head sits in a fused qkv row [q: NH*hs | k: KVH*hs | v: KVH*hs]. Query head h = kv·g + j
// (g = NH/KVH query heads per kv head, j = 0..g-1) reads kv head kv: the j-th heads of all groups
// are g·hs columns apart in q (and in out, dout), g·T·T apart in att, while kv heads are hs apart.
struct AttentionLayout {
  int NH, KVH, hs;
  int group() const { return NH / KVH; }
  int q_cols() const { return NH * hs; }
  int k_offset() const { return NH * hs; }
  int v_offset() const { return (NH + KVH) * hs; }
  int row() const { return (NH + 2 * KVH) * hs; }
  long seq_qkv(int T) const { return static_cast<long>(T) * row(); }
  long seq_out(int T) const { return static_cast<long>(T) * q_cols(); }
  long seq_att(int T) const { return static_cast<long>(NH) * T * T; }
  // One product's batch: the B sequences (outer; A, B, C `per_sequence` apart) times the KVH kv-head
  // groups (inner; `per_group` apart inside a sequence).
  StridedBatch batch(int B, BatchStride per_sequence, BatchStride per_group) const {
    return {B, per_sequence, KVH, per_group};
  }
};

}  // namespace detail

// Grouped-query attention (GQA; KVH = NH is multi-head, KVH = 1 multi-query): query head h uses kv
// head h / (NH/KVH), as torch's repeat_interleave of the kv heads (Hugging Face's repeat_kv).
//   forward:  S_h = scale · Q_h K_kvᵀ,  P_h = causal_softmax(S_h),  O_h = P_h V_kv
//   backward: dP_h, dS_h, dQ_h as for multi-head; dK_kv = scale · Σ_{h in kv's group} dS_hᵀ Q_h,
//             dV_kv = Σ_{h in kv's group} P_hᵀ dO_h
// Each product is one strided GEMM batch per j = 0..g-1, over the sequences and the KVH groups; dK and dV sum over j
// with beta 0 then 1 (16-bit Real rounds them after each j). With KVH = NH (g = 1) the GEMM calls are exactly the
// multi-head ones, in the same order.

// att [B*NH*T*T] ← P_h = causal_softmax(scale · Q_h K_kvᵀ), the first half of attention_forward; on
// its own it recomputes the probabilities for backward (selective recomputation), bit for bit.
// qkv is [B*T*(NH+2KVH)*hs].
template <class Real>
void attention_probabilities(const ExecSpace& space, Vec<Real> att, CVec<std::type_identity_t<Real>> qkv, int B, int T,
                             int NH, int KVH, int hs) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  const detail::AttentionLayout L{NH, KVH, hs};
  const int g = L.group();
  const accum_t<Real> scale = accum_t<Real>(1.0 / std::sqrt(static_cast<double>(hs)));
  const long tt = static_cast<long>(T) * T;
  const long sq = L.seq_qkv(T), sa = L.seq_att(T);

  // S_h = scale · Q_h K_kvᵀ, for every head of every sequence.
  for (int j = 0; j < g; ++j) {
    gemm_strided_batched<Real>(space, Trans::no, Trans::yes, GemmShape{T, T, hs}, scale, qkv.data() + j * hs, L.row(),
                               qkv.data() + L.k_offset(), L.row(), accum_t<Real>(0), att.data() + j * tt, T,
                               L.batch(B, {sq, sq, sa}, {long{g} * hs, hs, g * tt}));
  }
  detail::causal_softmax_forward<Real>(space, att, B * NH * T, T);
}

// out [B*T*NH*hs] and att [B*NH*T*T] are written. qkv is [B*T*(NH+2KVH)*hs].
template <class Real>
void attention_forward(const ExecSpace& space, Vec<Real> out, Vec<Real> att, CVec<std::type_identity_t<Real>> qkv,
                       int B, int T, int NH, int KVH, int hs) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  const detail::AttentionLayout L{NH, KVH, hs};
  const int g = L.group();
  const long tt = static_cast<long>(T) * T;
  const long sq = L.seq_qkv(T), so = L.seq_out(T), sa = L.seq_att(T);

  attention_probabilities<Real>(space, att, qkv, B, T, NH, KVH, hs);
  // O_h = P_h V_kv, written into the head's columns of out.
  for (int j = 0; j < g; ++j) {
    gemm_strided_batched<Real>(space, Trans::no, Trans::no, GemmShape{T, hs, T}, accum_t<Real>(1), att.data() + j * tt,
                               T, qkv.data() + L.v_offset(), L.row(), accum_t<Real>(0), out.data() + j * hs, L.q_cols(),
                               L.batch(B, {sa, sq, so}, {g * tt, hs, long{g} * hs}));
  }
}

// dqkv [B*T*(NH+2KVH)*hs] is written (=), every column. datt [B*NH*T*T] is scratch (holds dS
// afterwards). att is the forward's P. No argument may share memory with another.
template <class Real>
void attention_backward(const ExecSpace& space, Vec<Real> dqkv, Vec<Real> datt, CVec<std::type_identity_t<Real>> dout,
                        CVec<std::type_identity_t<Real>> qkv, CVec<std::type_identity_t<Real>> att, int B, int T,
                        int NH, int KVH, int hs) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  const detail::AttentionLayout L{NH, KVH, hs};
  const int g = L.group();
  const int row = L.row();
  const A scale = A(1.0 / std::sqrt(static_cast<double>(hs)));
  const long tt = static_cast<long>(T) * T;
  const long q_stride = long{g} * hs;  // between the j-th query heads of consecutive groups
  const long sq = L.seq_qkv(T), so = L.seq_out(T), sa = L.seq_att(T);

  for (int j = 0; j < g; ++j) {
    const Real* dout_j = dout.data() + j * hs;
    const long att_j = j * tt;
    // dP_h = dO_h V_kvᵀ
    gemm_strided_batched<Real>(space, Trans::no, Trans::yes, GemmShape{T, T, hs}, A(1), dout_j, L.q_cols(),
                               qkv.data() + L.v_offset(), row, A(0), datt.data() + att_j, T,
                               L.batch(B, {so, sq, sa}, {q_stride, hs, g * tt}));
    // dV_kv (+)= P_hᵀ dO_h
    gemm_strided_batched<Real>(space, Trans::yes, Trans::no, GemmShape{T, hs, T}, A(1), att.data() + att_j, T, dout_j,
                               L.q_cols(), A(j == 0 ? 0 : 1), dqkv.data() + L.v_offset(), row,
                               L.batch(B, {sa, so, sq}, {g * tt, q_stride, hs}));
  }
  detail::causal_softmax_backward<Real>(space, datt, att, B * NH * T, T);
  for (int j = 0; j < g; ++j) {
    const Real* ds_j = datt.data() + j * tt;
    // dQ_h = scale · dS_h K_kv
    gemm_strided_batched<Real>(space, Trans::no, Trans::no, GemmShape{T, hs, T}, scale, ds_j, T,
                               qkv.data() + L.k_offset(), row, A(0), dqkv.data() + j * hs, row,
                               L.batch(B, {sa, sq, sq}, {g * tt, hs, q_stride}));
    // dK_kv (+)= scale · dS_hᵀ Q_h
    gemm_strided_batched<Real>(space, Trans::yes, Trans::no, GemmShape{T, hs, T}, scale, ds_j, T, qkv.data() + j * hs,
                               row, A(j == 0 ? 0 : 1), dqkv.data() + L.k_offset(), row,
                               L.batch(B, {sa, sq, sq}, {g * tt, q_stride, hs}));
  }
}

// Multi-head attention, C = NH·hs channels, qkv [B*T*3C]: the KVH = NH case of the functions above.
template <class Real>
void attention_probabilities(const ExecSpace& space, Vec<Real> att, CVec<std::type_identity_t<Real>> qkv, int B, int T,
                             int C, int NH) {
  attention_probabilities<Real>(space, att, qkv, B, T, NH, NH, C / NH);
}

template <class Real>
void attention_forward(const ExecSpace& space, Vec<Real> out, Vec<Real> att, CVec<std::type_identity_t<Real>> qkv,
                       int B, int T, int C, int NH) {
  attention_forward<Real>(space, out, att, qkv, B, T, NH, NH, C / NH);
}

template <class Real>
void attention_backward(const ExecSpace& space, Vec<Real> dqkv, Vec<Real> datt, CVec<std::type_identity_t<Real>> dout,
                        CVec<std::type_identity_t<Real>> qkv, CVec<std::type_identity_t<Real>> att, int B, int T, int C,
                        int NH) {
  attention_backward<Real>(space, dqkv, datt, dout, qkv, att, B, T, NH, NH, C / NH);
}

}  // namespace meshtrain
