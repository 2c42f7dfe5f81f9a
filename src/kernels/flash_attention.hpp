// Fused causal attention (flash-style): keeps the output and one log-sum-exp per row, never a T×T matrix.
//
// Sizes and layouts as in kernels/attention.hpp: B batch, T time, NH query heads, KVH kv heads (KVH divides
// NH, g = NH/KVH; query head h reads kv head h/g, which is never repeated), hs head size.
//   qkv [B,T,(NH+2KVH)·hs]: columns q (NH·hs) | k (KVH·hs) | v (KVH·hs); query head h at column h·hs,
//   kv head k of k at NH·hs + k·hs, of v at (NH+KVH)·hs + k·hs.
//   out [B,T,NH·hs]: head h writes columns h·hs .. h·hs+hs−1.
//   lse [B,NH,T] in accum_t<Real>: the log-sum-exp of each row's scaled, masked scores.
//   segments: the documents of each sequence (AttentionSegments); none: plain causal.
//
// Query i attends to keys j with start(i) ≤ j ≤ i, start(i) the first position of i's document:
//   forward:  s_ij = scale · q_i·k_j,  lse_i = log Σ_j exp(s_ij),  o_i = Σ_j exp(s_ij − lse_i) v_j,
//             scale = 1/sqrt(hs)
//   backward: D_i = do_i·o_i,  P_ij = exp(s_ij − lse_i),  dS_ij = P_ij (do_i·v_j − D_i),
//             dq_i = scale Σ_j dS_ij k_j,  dk_j = scale Σ_{h in group} Σ_i dS_ij q_i,
//             dv_j = Σ_{h in group} Σ_i P_ij do_i
//
// Tiles of Q rows and of K/V rows (flash_attention_forward_tile / _backward_tile rows each) sit in team
// scratch (level 0, within 32 KiB: what Kokkos allows on the host and on CUDA). The forward keeps a
// running maximum and sum per row and rescales its partial output (online softmax). kv tiles past the
// diagonal, or before the document's start, are never visited; in the backward, query tiles past the kv
// tile's document neither.
//
// Launches: forward one (a team per query tile of one head); backward three: D_i into the workspace, then
// dK/dV by teams that own a kv tile of one kv head (looping over the g query heads of its group, then the
// query tiles, in that order), then dQ by teams that own a query tile of one head (looping over kv tiles).
// One thread computes each score row, or each output row, whole and in a fixed order; team threads share
// out rows, never a sum. No atomics: the results are bitwise the same for any team size or thread count.
//
// 16-bit Real: q, k, v, out, dout are read as Real and widened; the math, the scratch tiles and lse are
// float; out and dqkv are rounded once. P and dS are never stored outside a tile.
#pragma once

#include "core/exec.hpp"
#include "kernels/attention_segments.hpp"
#include "kernels/fast_math.hpp"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace meshtrain {

// Scratch bytes a team may take: Kokkos' level-0 limit on the host (32 KiB, "roughly L1"), under CUDA's
// (40 KiB of the 48 KiB default).
inline constexpr std::size_t kFlashScratchBudget = 32 * 1024;

namespace detail {

// Elements of accum_t a team holds. Forward: Q, Kᵀ, V and O tiles (tile×hs), the score tile, the running
// maximum and sum of each row. Backward (either kernel): six tile×hs tiles, two tile×tile, lse and D of
// each row. Each also holds `tile` ints (document starts).
constexpr std::size_t flash_forward_elements(int tile, int hs) {
  return 4 * std::size_t(tile) * hs + std::size_t(tile) * tile + 2 * std::size_t(tile);
}
constexpr std::size_t flash_backward_elements(int tile, int hs) {
  return 6 * std::size_t(tile) * hs + 2 * std::size_t(tile) * tile + 2 * std::size_t(tile);
}

// The largest power of two ≤ 64 whose scratch (elements(tile, hs) of A, tile ints, alignment) fits the budget.
template <class A>
constexpr int largest_tile(int hs, std::size_t (*elements)(int, int)) {
  for (int tile = 64; tile > 1; tile /= 2) {
    if (elements(tile, hs) * sizeof(A) + sizeof(int) * tile + 256 <= kFlashScratchBudget) return tile;
  }
  return 1;
}

}  // namespace detail

// Rows per query tile and per kv tile (the same for both) of the forward and of the backward. They depend on
// hs and the accumulation type only, so every backend and team size adds in the same order. float, hs 64:
// 16 rows both.
template <class A>
constexpr int flash_attention_forward_tile(int hs) {
  return detail::largest_tile<A>(hs, detail::flash_forward_elements);
}
template <class A>
constexpr int flash_attention_backward_tile(int hs) {
  return detail::largest_tile<A>(hs, detail::flash_backward_elements);
}

// Elements of accum_t<Real> the backward's workspace holds: D, one per row of every head.
constexpr std::size_t flash_attention_backward_workspace(int B, int T, int NH) {
  return std::size_t(B) * std::size_t(NH) * std::size_t(T);
}

namespace detail {

// Sums of products kept in registers: acc[j] += Σ_{t0 ≤ t < t1} x(t) · y(t)[j] for j < w ≤ kFlashLanes, t in
// order. A row of kFlashLanes compiles to vector FMAs with no store per t (a store and reload per t, as
// `row[j] += …` in memory gives, made the host kernels latency-bound); each sum's order is the same.
inline constexpr int kFlashLanes = 16;

template <class A, class X, class Y>
KOKKOS_FORCEINLINE_FUNCTION void accumulate_lanes(A (&acc)[kFlashLanes], int w, int t0, int t1, const X& x,
                                                  const Y& y) {
  if (w == kFlashLanes) {
    for (int t = t0; t < t1; ++t) {
      const A a = x(t);
      const A* const v = y(t);
      for (int j = 0; j < kFlashLanes; ++j) acc[j] += a * v[j];
    }
  } else {
    for (int t = t0; t < t1; ++t) {
      const A a = x(t);
      const A* const v = y(t);
      for (int j = 0; j < w; ++j) acc[j] += a * v[j];
    }
  }
}

// row[c] = Σ_{d < hs} x[d] · cols[d·stride + c] for c in [c0, c1): a row of a tile product whose right
// factor is stored transposed (Kᵀ, Vᵀ), d in order.
template <class A>
KOKKOS_FORCEINLINE_FUNCTION void tile_row_product(A* row, const A* x, const A* cols, int stride, int hs, int c0,
                                                  int c1) {
  for (int cc = c0; cc < c1; cc += kFlashLanes) {
    const int w = c1 - cc < kFlashLanes ? c1 - cc : kFlashLanes;
    A acc[kFlashLanes] = {};
    accumulate_lanes(
        acc, w, 0, hs, [&](int d) { return x[d]; }, [&](int d) { return cols + d * stride + cc; });
    for (int j = 0; j < w; ++j) row[cc + j] = acc[j];
  }
}

// out[d] = first[d] · alpha + Σ_{t0 ≤ t < t1} x(t) · y(t)[d] for d < hs, t in order: a row of P·V, dS·K,
// Pᵀ·dO or dSᵀ·Q added to (alpha = 1) or rescaled into (the forward's online softmax) its running value.
template <class A, class X, class Y>
KOKKOS_FORCEINLINE_FUNCTION void add_row_products(A* out, A alpha, int hs, int t0, int t1, const X& x, const Y& y) {
  for (int d0 = 0; d0 < hs; d0 += kFlashLanes) {
    const int w = hs - d0 < kFlashLanes ? hs - d0 : kFlashLanes;
    A acc[kFlashLanes] = {};
    for (int j = 0; j < w; ++j) acc[j] = out[d0 + j] * alpha;
    accumulate_lanes(acc, w, t0, t1, x, [&](int t) { return y(t) + d0; });
    for (int j = 0; j < w; ++j) out[d0 + j] = acc[j];
  }
}

// Checks the sizes every entry point shares; the document bounds.
inline DocumentBounds flash_attention_checks(const char* what, int B, int T, int NH, int KVH, int hs, int tile,
                                             std::size_t bytes, const AttentionSegments& segments) {
  if (NH <= 0 || KVH <= 0 || hs <= 0 || NH % KVH != 0) {
    throw std::invalid_argument(std::string(what) + ": the kv heads (" + std::to_string(KVH) +
                                ") must divide the query heads (" + std::to_string(NH) + "), hs > 0");
  }
  if (segments.docs < 0 || segments.offsets.extent(0) < attention_segments_size(B, segments.docs)) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(segments.offsets.extent(0)) +
                                " segment offsets for " + std::to_string(B) + " sequences of " +
                                std::to_string(segments.docs) + " documents");
  }
  if (bytes > std::size_t(Kokkos::TeamPolicy<ExecSpace>::scratch_size_max(0))) {
    throw std::invalid_argument(std::string(what) + ": head size " + std::to_string(hs) + " needs " +
                                std::to_string(bytes) + " bytes of team scratch at tile " + std::to_string(tile));
  }
  return DocumentBounds{segments.offsets.data(), segments.docs, T};
}

}  // namespace detail

// out [B*T*NH*hs] and lse [B*NH*T] are written. qkv is [B*T*(NH+2KVH)*hs].
template <class Real>
void flash_attention_forward(const ExecSpace& space, Vec<Real> out, Vec<accum_t<Real>> lse,
                             CVec<std::type_identity_t<Real>> qkv, int B, int T, int NH, int KVH, int hs,
                             const AttentionSegments& segments = {}) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using ScratchA = Kokkos::View<A*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using ScratchI = Kokkos::View<int*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  if (B <= 0 || T <= 0) return;
  const int bt = flash_attention_forward_tile<A>(hs);
  const std::size_t nA = detail::flash_forward_elements(bt, hs);
  const std::size_t bytes = ScratchA::shmem_size(nA) + ScratchI::shmem_size(bt);
  const detail::DocumentBounds docs =
      detail::flash_attention_checks("flash_attention_forward", B, T, NH, KVH, hs, bt, bytes, segments);
  const int tiles = (T + bt - 1) / bt;
  const int g = NH / KVH;
  const long row = long(NH + 2 * KVH) * hs, q_cols = long(NH) * hs;
  const long k_offset = long(NH) * hs, v_offset = long(NH + KVH) * hs;
  const A scale = A(1.0 / std::sqrt(static_cast<double>(hs)));

  Kokkos::parallel_for(
      "meshtrain::flash_attention::forward",
      team_policy(space, B * NH * tiles).set_scratch_size(0, Kokkos::PerTeam(bytes)), KOKKOS_LAMBDA(const Team& team) {
        const int qt = team.league_rank() % tiles;
        const int h = (team.league_rank() / tiles) % NH;
        const int b = team.league_rank() / (tiles * NH);
        const int kv = h / g;
        const int i0 = qt * bt;
        const int nr = T - i0 < bt ? T - i0 : bt;
        const long seq = long(b) * T;
        ScratchA s(team.team_scratch(0), nA);
        ScratchI start(team.team_scratch(0), bt);
        A* const Q = s.data();      // [bt][hs]
        A* const Kt = Q + bt * hs;  // [hs][bt]
        A* const V = Kt + bt * hs;  // [bt][hs]
        A* const O = V + bt * hs;   // [bt][hs], unnormalised
        A* const S = O + bt * hs;   // [bt][bt]: scores, then exp(s − m)
        A* const m = S + bt * bt;   // running maximum of each row
        A* const l = m + bt;        // running sum of each row

        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nr), [&](int r) {
          const long at = (seq + i0 + r) * row + h * hs;
          for (int d = 0; d < hs; ++d) {
            Q[r * hs + d] = A(qkv(at + d));
            O[r * hs + d] = A(0);
          }
          start(r) = docs.start(b, i0 + r);
          m[r] = A(0);
          l[r] = A(0);
        });
        team.team_barrier();
        // From the tile of the first row's document start (the earliest of the tile's) to the diagonal.
        for (int kt = docs.start(b, i0) / bt; kt <= qt; ++kt) {
          const int j0 = kt * bt;
          const int nc = T - j0 < bt ? T - j0 : bt;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc), [&](int c) {
            const long at = (seq + j0 + c) * row + kv * hs;
            for (int d = 0; d < hs; ++d) {
              Kt[d * bt + c] = A(qkv(at + k_offset + d));
              V[c * hs + d] = A(qkv(at + v_offset + d));
            }
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nr), [&](int r) {
            // Keys [c0, c1) of this tile are in row r's document and not after it.
            const int c0 = start(r) > j0 ? start(r) - j0 : 0;
            const int c1 = i0 + r - j0 + 1 < nc ? i0 + r - j0 + 1 : nc;
            if (c0 >= c1) return;
            A* const Sr = S + r * bt;
            detail::tile_row_product(Sr, Q + r * hs, Kt, bt, hs, c0, c1);
            A top = scale * Sr[c0];
            for (int c = c0; c < c1; ++c) {
              Sr[c] *= scale;
              top = Sr[c] > top ? Sr[c] : top;
            }
            const bool first = l[r] == A(0);
            const A m_new = !first && m[r] > top ? m[r] : top;
            const A alpha = first ? A(0) : fast_exp(m[r] - m_new);
            A sum = 0;
            for (int c = c0; c < c1; ++c) {
              Sr[c] = fast_exp(Sr[c] - m_new);
              sum += Sr[c];
            }
            l[r] = alpha * l[r] + sum;
            m[r] = m_new;
            detail::add_row_products(
                O + r * hs, alpha, hs, c0, c1, [&](int c) { return Sr[c]; }, [&](int c) { return V + c * hs; });
          });
          team.team_barrier();
        }
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nr), [&](int r) {
          const long at = (seq + i0 + r) * q_cols + h * hs;
          for (int d = 0; d < hs; ++d) out(at + d) = Real(O[r * hs + d] / l[r]);
          lse((long(b) * NH + h) * T + i0 + r) = m[r] + kmath::log(l[r]);
        });
      });
}

// dqkv [B*T*(NH+2KVH)*hs] is written (=), every column. dout and out are [B*T*NH*hs], lse [B*NH*T] the
// forward's; workspace holds flash_attention_backward_workspace(B, T, NH) elements. No argument may
// share memory with another.
template <class Real>
void flash_attention_backward(const ExecSpace& space, Vec<Real> dqkv, CVec<std::type_identity_t<Real>> dout,
                              CVec<std::type_identity_t<Real>> qkv, CVec<std::type_identity_t<Real>> out,
                              CVec<accum_t<Real>> lse, int B, int T, int NH, int KVH, int hs,
                              const AttentionSegments& segments, Vec<accum_t<Real>> workspace) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using ScratchA = Kokkos::View<A*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using ScratchI = Kokkos::View<int*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  if (B <= 0 || T <= 0) return;
  const int bt = flash_attention_backward_tile<A>(hs);
  const std::size_t nA = detail::flash_backward_elements(bt, hs);
  const std::size_t bytes = ScratchA::shmem_size(nA) + ScratchI::shmem_size(bt);
  const detail::DocumentBounds docs =
      detail::flash_attention_checks("flash_attention_backward", B, T, NH, KVH, hs, bt, bytes, segments);
  if (workspace.extent(0) < flash_attention_backward_workspace(B, T, NH)) {
    throw std::invalid_argument("flash_attention_backward: workspace of " + std::to_string(workspace.extent(0)) +
                                " elements, " + std::to_string(flash_attention_backward_workspace(B, T, NH)) +
                                " needed");
  }
  const int tiles = (T + bt - 1) / bt;
  const int g = NH / KVH;
  const long row = long(NH + 2 * KVH) * hs, q_cols = long(NH) * hs;
  const long k_offset = long(NH) * hs, v_offset = long(NH + KVH) * hs;
  const A scale = A(1.0 / std::sqrt(static_cast<double>(hs)));
  const Vec<A> D = workspace;

  // D_i = do_i·o_i, [B][NH][T] like lse.
  Kokkos::parallel_for(
      "meshtrain::flash_attention::backward_d", Kokkos::RangePolicy<ExecSpace>(space, 0, long(B) * NH * T),
      KOKKOS_LAMBDA(const long n) {
        const long t = n % T, h = (n / T) % NH, b = n / (long(T) * NH);
        const long at = (b * T + t) * q_cols + h * hs;
        A sum = 0;
        for (int d = 0; d < hs; ++d) sum += A(dout(at + d)) * A(out(at + d));
        D(n) = sum;
      });

  // dK, dV: a team per kv tile of one kv head; the group's query heads in order, each's query tiles from
  // the diagonal to the end of the tile's last document.
  Kokkos::parallel_for(
      "meshtrain::flash_attention::backward_dkdv",
      team_policy(space, B * KVH * tiles).set_scratch_size(0, Kokkos::PerTeam(bytes)), KOKKOS_LAMBDA(const Team& team) {
        const int kt = team.league_rank() % tiles;
        const int kv = (team.league_rank() / tiles) % KVH;
        const int b = team.league_rank() / (tiles * KVH);
        const int j0 = kt * bt;
        const int nc = T - j0 < bt ? T - j0 : bt;
        const long seq = long(b) * T;
        ScratchA s(team.team_scratch(0), nA);
        ScratchI start(team.team_scratch(0), bt);
        A* const Kt = s.data();      // [hs][bt]
        A* const Vt = Kt + bt * hs;  // [hs][bt]
        A* const dK = Vt + bt * hs;  // [bt][hs], Σ dS q (scaled when written)
        A* const dV = dK + bt * hs;  // [bt][hs]
        A* const Q = dV + bt * hs;   // [bt][hs]
        A* const dO = Q + bt * hs;   // [bt][hs]
        A* const P = dO + bt * hs;   // [bt][bt]: scores, then P
        A* const dS = P + bt * bt;   // [bt][bt]: do·v, then dS
        A* const L = dS + bt * bt;   // lse of the query tile's rows
        A* const Dr = L + bt;        // D of the query tile's rows

        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc), [&](int c) {
          const long at = (seq + j0 + c) * row + kv * hs;
          for (int d = 0; d < hs; ++d) {
            Kt[d * bt + c] = A(qkv(at + k_offset + d));
            Vt[d * bt + c] = A(qkv(at + v_offset + d));
            dK[c * hs + d] = A(0);
            dV[c * hs + d] = A(0);
          }
        });
        const int last_tile = (docs.end(b, j0 + nc - 1) - 1) / bt;
        for (int jh = 0; jh < g; ++jh) {
          const int h = kv * g + jh;
          for (int qt = kt; qt <= last_tile; ++qt) {
            const int i0 = qt * bt;
            const int nr = T - i0 < bt ? T - i0 : bt;
            team.team_barrier();  // the previous tile's reads are done
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nr), [&](int r) {
              const long q_at = (seq + i0 + r) * row + h * hs, o_at = (seq + i0 + r) * q_cols + h * hs;
              for (int d = 0; d < hs; ++d) {
                Q[r * hs + d] = A(qkv(q_at + d));
                dO[r * hs + d] = A(dout(o_at + d));
              }
              const long at = (long(b) * NH + h) * T + i0 + r;
              start(r) = docs.start(b, i0 + r);
              L[r] = lse(at);
              Dr[r] = D(at);
            });
            team.team_barrier();
            // P and dS of row r: keys [c0, c1) are in its document and not after it.
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nr), [&](int r) {
              const int c0 = start(r) > j0 ? start(r) - j0 : 0;
              const int c1 = i0 + r - j0 + 1 < nc ? i0 + r - j0 + 1 : nc;
              if (c0 >= c1) return;
              A* const Pr = P + r * bt;
              A* const dSr = dS + r * bt;
              detail::tile_row_product(Pr, Q + r * hs, Kt, bt, hs, c0, c1);
              detail::tile_row_product(dSr, dO + r * hs, Vt, bt, hs, c0, c1);
              for (int c = c0; c < c1; ++c) {
                Pr[c] = fast_exp(scale * Pr[c] - L[r]);
                dSr[c] = Pr[c] * (dSr[c] - Dr[r]);
              }
            });
            team.team_barrier();
            // Column c adds the rows that see key j0 + c: from the diagonal while in its document.
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc), [&](int c) {
              const int j = j0 + c;
              const int r0 = j - i0 > 0 ? j - i0 : 0;
              int r1 = r0;
              while (r1 < nr && start(r1) <= j) ++r1;
              detail::add_row_products(
                  dV + c * hs, A(1), hs, r0, r1, [&](int r) { return P[r * bt + c]; },
                  [&](int r) { return dO + r * hs; });
              detail::add_row_products(
                  dK + c * hs, A(1), hs, r0, r1, [&](int r) { return dS[r * bt + c]; },
                  [&](int r) { return Q + r * hs; });
            });
          }
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc), [&](int c) {
          const long at = (seq + j0 + c) * row + kv * hs;
          for (int d = 0; d < hs; ++d) {
            dqkv(at + k_offset + d) = Real(scale * dK[c * hs + d]);
            dqkv(at + v_offset + d) = Real(dV[c * hs + d]);
          }
        });
      });

  // dQ: a team per query tile of one head, its kv tiles from the document start to the diagonal.
  Kokkos::parallel_for(
      "meshtrain::flash_attention::backward_dq",
      team_policy(space, B * NH * tiles).set_scratch_size(0, Kokkos::PerTeam(bytes)), KOKKOS_LAMBDA(const Team& team) {
        const int qt = team.league_rank() % tiles;
        const int h = (team.league_rank() / tiles) % NH;
        const int b = team.league_rank() / (tiles * NH);
        const int kv = h / g;
        const int i0 = qt * bt;
        const int nr = T - i0 < bt ? T - i0 : bt;
        const long seq = long(b) * T;
        ScratchA s(team.team_scratch(0), nA);
        ScratchI start(team.team_scratch(0), bt);
        A* const Q = s.data();       // [bt][hs]
        A* const dO = Q + bt * hs;   // [bt][hs]
        A* const dQ = dO + bt * hs;  // [bt][hs], Σ dS k (scaled when written)
        A* const Kt = dQ + bt * hs;  // [hs][bt]
        A* const Vt = Kt + bt * hs;  // [hs][bt]
        A* const K = Vt + bt * hs;   // [bt][hs]
        A* const S = K + bt * hs;    // [bt][bt]: scores
        A* const dP = S + bt * bt;   // [bt][bt]: do·v
        A* const L = dP + bt * bt;
        A* const Dr = L + bt;

        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nr), [&](int r) {
          const long q_at = (seq + i0 + r) * row + h * hs, o_at = (seq + i0 + r) * q_cols + h * hs;
          for (int d = 0; d < hs; ++d) {
            Q[r * hs + d] = A(qkv(q_at + d));
            dO[r * hs + d] = A(dout(o_at + d));
            dQ[r * hs + d] = A(0);
          }
          const long at = (long(b) * NH + h) * T + i0 + r;
          start(r) = docs.start(b, i0 + r);
          L[r] = lse(at);
          Dr[r] = D(at);
        });
        for (int kt = docs.start(b, i0) / bt; kt <= qt; ++kt) {
          const int j0 = kt * bt;
          const int nc = T - j0 < bt ? T - j0 : bt;
          team.team_barrier();  // the row loads, or the previous tile's reads, are done
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc), [&](int c) {
            const long at = (seq + j0 + c) * row + kv * hs;
            for (int d = 0; d < hs; ++d) {
              Kt[d * bt + c] = K[c * hs + d] = A(qkv(at + k_offset + d));
              Vt[d * bt + c] = A(qkv(at + v_offset + d));
            }
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nr), [&](int r) {
            const int c0 = start(r) > j0 ? start(r) - j0 : 0;
            const int c1 = i0 + r - j0 + 1 < nc ? i0 + r - j0 + 1 : nc;
            if (c0 >= c1) return;
            A* const Sr = S + r * bt;
            A* const dPr = dP + r * bt;
            detail::tile_row_product(Sr, Q + r * hs, Kt, bt, hs, c0, c1);
            detail::tile_row_product(dPr, dO + r * hs, Vt, bt, hs, c0, c1);
            for (int c = c0; c < c1; ++c) dPr[c] = fast_exp(scale * Sr[c] - L[r]) * (dPr[c] - Dr[r]);  // dS
            detail::add_row_products(
                dQ + r * hs, A(1), hs, c0, c1, [&](int c) { return dPr[c]; }, [&](int c) { return K + c * hs; });
          });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nr), [&](int r) {
          const long at = (seq + i0 + r) * row + h * hs;
          for (int d = 0; d < hs; ++d) dqkv(at + d) = Real(scale * dQ[r * hs + d]);
        });
      });
}

}  // namespace meshtrain
