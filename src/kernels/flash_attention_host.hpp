// Fused causal attention for host builds through the BLAS: kernels/flash_attention.hpp's equations,
// layouts and document masks, with the tile products as GEMMs (OpenBLAS, threaded) instead of loops in
// team scratch. Nothing of size T×T: blocks of kFlashHostRows query rows against the keys they see.
//
// Per sequence and kv head (its K and V read in place for float and double, widened once into the
// workspace for 16-bit Real), for each query head of its group and each block of query rows [i0, i1), with
// lo the block's first document start:
//   forward:  S = scale · Q_blk K[lo:i1)ᵀ (GEMM), each row's softmax over its keys [start(i), i] (exp
//             s − max, the rest 0), O_blk = P V[lo:i1) / rowsum (GEMM), lse = max + log rowsum
//   backward: S as in the forward (the same GEMM, so the same scores), P = exp(S − lse), dP = dO_blk
//             V[lo:i1)ᵀ, dS = P ⊙ (dP − D) with D_i = do_i·o_i, dQ_blk = scale · dS K[lo:i1),
//             dV[lo:i1) += Pᵀ dO_blk, dK[lo:i1) += scale · dSᵀ Q_blk (GEMMs; dK, dV of the kv head in
//             accum_t, written once)
// The blocks, heads and sequences run in order, so dK and dV add in a fixed order; P and dS stay in
// accum_t (float for 16-bit Real, whose q, k, v, dout are widened once and out, dqkv rounded once).
// Host memory only (the workspace and the views are read by host loops).
#pragma once

#include "kernels/fast_math.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/gemm.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace meshtrain {

// Query rows per block: a block's scores are kFlashHostRows × (keys it sees).
inline constexpr int kFlashHostRows = 64;

// Elements of accum_t<Real> the workspace of either direction holds: a block's scores and their gradients
// (rows×T each), its dQ or O (rows×hs) and row sums; for 16-bit Real also K, V, dK, dV, Q, dO widened to
// float (T×hs each), which float and double read and write where they are.
template <class Real>
constexpr std::size_t flash_attention_host_workspace(int T, int hs) {
  const std::size_t t = std::size_t(T), h = std::size_t(hs), r = std::size_t(kFlashHostRows);
  return 2 * r * t + r * h + r + (std::is_same_v<Real, accum_t<Real>> ? 0 : 6 * t * h);
}

namespace detail {

template <class Real>
void flash_host_checks(const char* what, std::size_t workspace, int B, int T, int NH, int KVH, int hs,
                       const AttentionSegments& segments) {
  static_assert(Kokkos::SpaceAccessibility<HostSpace, typename Vec<Real>::memory_space>::accessible,
                "host builds only");
  flash_attention_checks(what, B, T, NH, KVH, hs, 1, 0, segments);
  if (workspace < flash_attention_host_workspace<Real>(T, hs)) {
    throw std::invalid_argument(std::string(what) + ": workspace of " + std::to_string(workspace) + " elements, " +
                                std::to_string(flash_attention_host_workspace<Real>(T, hs)) + " needed");
  }
}

// What both directions compute before their loops: the document bounds, the heads per kv head g, the rows
// of a query block R, where a head's columns start in a qkv row (row elements long; q_cols of them in an
// out row), the elements of one T×hs operand th, and the scores' scale 1/sqrt(hs).
template <class A>
struct HostCall {
  DocumentBounds docs;
  int g, R;
  long row, q_cols, k_offset, v_offset, th;
  A scale;
};

// The checks both directions make (flash_host_checks), and their HostCall.
template <class Real>
HostCall<accum_t<Real>> host_call(const char* what, std::size_t workspace, int B, int T, int NH, int KVH, int hs,
                                  const AttentionSegments& segments) {
  flash_host_checks<Real>(what, workspace, B, T, NH, KVH, hs, segments);
  return {DocumentBounds{segments.offsets.data(), segments.docs, T},
          NH / KVH,
          kFlashHostRows,
          long(NH + 2 * KVH) * hs,
          long(NH) * hs,
          long(NH) * hs,
          long(NH + KVH) * hs,
          long(T) * hs,
          accum_t<Real>(1.0 / std::sqrt(static_cast<double>(hs)))};
}

// A T×hs operand whose rows sit `ld` elements apart from `base` (a head's columns of qkv or dout): used in
// place when Real is the accumulation type (float, double), else widened into `copy` (rows hs apart).
template <class Real, class A>
std::pair<const A*, int> host_operand(const Real* base, long ld, int T, int hs, A* copy) {
  if constexpr (std::is_same_v<Real, A>) {
    return {base, int(ld)};
  } else {
    for (long t = 0; t < T; ++t) {
      for (int d = 0; d < hs; ++d) copy[t * hs + d] = A(base[t * ld + d]);
    }
    return {copy, hs};
  }
}

}  // namespace detail

// out [B*T*NH*hs] and lse [B*NH*T] are written, as flash_attention_forward writes them. qkv is
// [B*T*(NH+2KVH)*hs]; workspace holds flash_attention_host_workspace<Real>(T, hs) elements.
template <class Real>
void flash_attention_host_forward(const ExecSpace& space, Vec<Real> out, Vec<accum_t<Real>> lse,
                                  CVec<std::type_identity_t<Real>> qkv, int B, int T, int NH, int KVH, int hs,
                                  const AttentionSegments& segments, Vec<accum_t<Real>> workspace) {
  using A = accum_t<Real>;
  constexpr bool in_place = std::is_same_v<Real, A>;  // operands and results used where they are
  if (B <= 0 || T <= 0) return;
  const auto [docs, g, R, row, q_cols, k_offset, v_offset, th, scale] =
      detail::host_call<Real>("flash_attention_host_forward", workspace.extent(0), B, T, NH, KVH, hs, segments);
  A* const S = workspace.data();
  A* const O = S + long(R) * T;             // a block's rows × hs (16-bit Real)
  A* const L = O + long(R) * hs;            // a block's row sums
  A* const K = in_place ? nullptr : L + R;  // 16-bit Real: the widened operands
  A* const V = in_place ? nullptr : K + th;
  A* const Q = in_place ? nullptr : V + th;
  space.fence();  // host loops read what the space wrote

  for (int b = 0; b < B; ++b) {
    const long seq = long(b) * T;
    for (int kv = 0; kv < KVH; ++kv) {
      const auto [Kp, ldk] = detail::host_operand(qkv.data() + seq * row + k_offset + kv * hs, row, T, hs, K);
      const auto [Vp, ldv] = detail::host_operand(qkv.data() + seq * row + v_offset + kv * hs, row, T, hs, V);
      for (int h = kv * g; h < (kv + 1) * g; ++h) {
        const auto [Qp, ldq] = detail::host_operand(qkv.data() + seq * row + h * hs, row, T, hs, Q);
        for (int i0 = 0; i0 < T; i0 += R) {
          const int nr = T - i0 < R ? T - i0 : R;
          const int lo = docs.start(b, i0);
          const int n = i0 + nr - lo;  // keys lo .. i0+nr-1
          gemm<A>(space, Trans::no, Trans::yes, GemmShape{nr, n, hs}, scale, Qp + long(i0) * ldq, ldq,
                  Kp + long(lo) * ldk, ldk, A(0), S, n);
          for (int r = 0; r < nr; ++r) {
            const int i = i0 + r;
            const int c0 = docs.start(b, i) - lo, c1 = i - lo + 1;
            A* const s = S + long(r) * n;
            A top = s[c0];
            for (int c = c0; c < c1; ++c) top = s[c] > top ? s[c] : top;
            A sum = 0;
            for (int c = 0; c < c0; ++c) s[c] = A(0);
            for (int c = c0; c < c1; ++c) {
              s[c] = fast_exp(s[c] - top);
              sum += s[c];
            }
            for (int c = c1; c < n; ++c) s[c] = A(0);
            L[r] = sum;
            lse((long(b) * NH + h) * T + i) = top + kmath::log(sum);
          }
          Real* const out_block = out.data() + (seq + i0) * q_cols + h * hs;
          if constexpr (in_place) {
            gemm<A>(space, Trans::no, Trans::no, GemmShape{nr, hs, n}, A(1), S, n, Vp + long(lo) * ldv, ldv, A(0),
                    out_block, int(q_cols));
            for (int r = 0; r < nr; ++r) {
              const A inv = A(1) / L[r];
              for (int d = 0; d < hs; ++d) out_block[r * q_cols + d] *= inv;
            }
          } else {
            gemm<A>(space, Trans::no, Trans::no, GemmShape{nr, hs, n}, A(1), S, n, Vp + long(lo) * ldv, ldv, A(0), O,
                    hs);
            for (int r = 0; r < nr; ++r) {
              const A inv = A(1) / L[r];
              for (int d = 0; d < hs; ++d) out_block[r * q_cols + d] = Real(O[long(r) * hs + d] * inv);
            }
          }
        }
      }
    }
  }
}

// dqkv [B*T*(NH+2KVH)*hs] is written (=), every column, as flash_attention_backward writes it; out and lse
// are the forward's; workspace holds flash_attention_host_workspace<Real>(T, hs) elements.
template <class Real>
void flash_attention_host_backward(const ExecSpace& space, Vec<Real> dqkv, CVec<std::type_identity_t<Real>> dout,
                                   CVec<std::type_identity_t<Real>> qkv, CVec<std::type_identity_t<Real>> out,
                                   CVec<accum_t<Real>> lse, int B, int T, int NH, int KVH, int hs,
                                   const AttentionSegments& segments, Vec<accum_t<Real>> workspace) {
  using A = accum_t<Real>;
  constexpr bool in_place = std::is_same_v<Real, A>;
  if (B <= 0 || T <= 0) return;
  const auto [docs, g, R, row, q_cols, k_offset, v_offset, th, scale] =
      detail::host_call<Real>("flash_attention_host_backward", workspace.extent(0), B, T, NH, KVH, hs, segments);
  A* const S = workspace.data();
  A* const dP = S + long(R) * T;
  A* const dQ = dP + long(R) * T;  // a block's rows × hs (16-bit Real)
  // 16-bit Real: the widened operands, and dK, dV in float until the kv head is done.
  A* const K = in_place ? nullptr : dQ + long(R) * hs + R;
  A* const V = in_place ? nullptr : K + th;
  A* const dK = in_place ? nullptr : V + th;
  A* const dV = in_place ? nullptr : dK + th;
  A* const Q = in_place ? nullptr : dV + th;
  A* const dO = in_place ? nullptr : Q + th;
  space.fence();

  for (int b = 0; b < B; ++b) {
    const long seq = long(b) * T;
    for (int kv = 0; kv < KVH; ++kv) {
      const auto [Kp, ldk] = detail::host_operand(qkv.data() + seq * row + k_offset + kv * hs, row, T, hs, K);
      const auto [Vp, ldv] = detail::host_operand(qkv.data() + seq * row + v_offset + kv * hs, row, T, hs, V);
      // dK, dV are sums over the group's heads and the blocks: in dqkv itself for float and double.
      A* dKp = dK;
      A* dVp = dV;
      int ldg = hs;
      if constexpr (in_place) {
        dKp = dqkv.data() + seq * row + k_offset + kv * hs;
        dVp = dqkv.data() + seq * row + v_offset + kv * hs;
        ldg = int(row);
      }
      for (long t = 0; t < T; ++t) {
        for (int d = 0; d < hs; ++d) dKp[t * ldg + d] = dVp[t * ldg + d] = A(0);
      }
      for (int h = kv * g; h < (kv + 1) * g; ++h) {
        const auto [Qp, ldq] = detail::host_operand(qkv.data() + seq * row + h * hs, row, T, hs, Q);
        const auto [dOp, ldo] = detail::host_operand(dout.data() + seq * q_cols + h * hs, q_cols, T, hs, dO);
        for (int i0 = 0; i0 < T; i0 += R) {
          const int nr = T - i0 < R ? T - i0 : R;
          const int lo = docs.start(b, i0);
          const int n = i0 + nr - lo;
          gemm<A>(space, Trans::no, Trans::yes, GemmShape{nr, n, hs}, scale, Qp + long(i0) * ldq, ldq,
                  Kp + long(lo) * ldk, ldk, A(0), S, n);
          gemm<A>(space, Trans::no, Trans::yes, GemmShape{nr, n, hs}, A(1), dOp + long(i0) * ldo, ldo,
                  Vp + long(lo) * ldv, ldv, A(0), dP, n);
          for (int r = 0; r < nr; ++r) {
            const int i = i0 + r;
            const long at = (seq + i) * q_cols + h * hs;
            A dot = 0;  // D_i
            for (int d = 0; d < hs; ++d) dot += dOp[long(i) * ldo + d] * A(out(at + d));
            const A l = lse((long(b) * NH + h) * T + i);
            const int c0 = docs.start(b, i) - lo, c1 = i - lo + 1;
            A* const s = S + long(r) * n;
            A* const ds = dP + long(r) * n;
            for (int c = 0; c < c0; ++c) s[c] = ds[c] = A(0);
            for (int c = c0; c < c1; ++c) {
              s[c] = fast_exp(s[c] - l);
              ds[c] = s[c] * (ds[c] - dot);
            }
            for (int c = c1; c < n; ++c) s[c] = ds[c] = A(0);
          }
          Real* const dq_block = dqkv.data() + (seq + i0) * row + h * hs;
          if constexpr (in_place) {
            gemm<A>(space, Trans::no, Trans::no, GemmShape{nr, hs, n}, scale, dP, n, Kp + long(lo) * ldk, ldk, A(0),
                    dq_block, int(row));
          } else {
            gemm<A>(space, Trans::no, Trans::no, GemmShape{nr, hs, n}, scale, dP, n, Kp + long(lo) * ldk, ldk, A(0), dQ,
                    hs);
            for (int r = 0; r < nr; ++r) {
              for (int d = 0; d < hs; ++d) dq_block[r * row + d] = Real(dQ[long(r) * hs + d]);
            }
          }
          gemm<A>(space, Trans::yes, Trans::no, GemmShape{n, hs, nr}, A(1), S, n, dOp + long(i0) * ldo, ldo, A(1),
                  dVp + long(lo) * ldg, ldg);
          gemm<A>(space, Trans::yes, Trans::no, GemmShape{n, hs, nr}, scale, dP, n, Qp + long(i0) * ldq, ldq, A(1),
                  dKp + long(lo) * ldg, ldg);
        }
      }
      if constexpr (!in_place) {
        for (long t = 0; t < T; ++t) {
          for (int d = 0; d < hs; ++d) {
            dqkv((seq + t) * row + k_offset + kv * hs + d) = Real(dK[t * hs + d]);
            dqkv((seq + t) * row + v_offset + kv * hs + d) = Real(dV[t * hs + d]);
          }
        }
      }
    }
  }
}

}  // namespace meshtrain
