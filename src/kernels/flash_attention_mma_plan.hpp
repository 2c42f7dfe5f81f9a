// The algorithm of the tensor-core attention backward (kernels/flash_attention_mma.cpp), in the pieces its
// host emulation (tests/kernels/flash_attention_mma_emulation.hpp) runs too: the tile sizes, which tiles a
// block visits and in what order, the mask of one score, and the softmax gradient of one score with the
// points where it is rounded to 16 bits. Equations and layouts are kernels/flash_attention.hpp's.
//
// FlashAttention-2's deterministic order: no atomics, every sum owned by one block and added in a fixed order.
//   D kernel:    D_i = do_i·o_i, a thread per row.
//   dK/dV kernel: a block per kv tile of one kv head; for each query head of its group in order, each query
//                tile from the diagonal to the end of the tile's last document in order: S = Q·Kᵀ and
//                dP = dO·Vᵀ on tensor cores, P and dS elementwise (score_gradient), then dV += Pᵀ·dO and
//                dK += dSᵀ·Q on tensor cores, P and dS rounded to Real first (tensor cores take 16-bit
//                operands; FlashAttention-2 rounds P the same way), fp32 accumulation in registers.
//   dQ kernel:   a block per query tile of one head; its kv tiles from the first row's document start to
//                the diagonal, in order: S, dP and dS again (recomputed: the price of no atomics), then
//                dQ += dS·K.
// dK is scaled by 1/sqrt(hs) once, when written, as dQ is.
#pragma once

#include "kernels/attention_segments.hpp"
#include "kernels/fast_math.hpp"
#include "kernels/flash_attention_mma.hpp"

namespace meshtrain::flash_mma {

inline constexpr int kTile = 64;                      // rows of a query tile and of a kv tile
inline constexpr int kFragment = 16;                  // m = n = k of one tensor-core product (wmma 16×16×16)
inline constexpr int kRowBlocks = kTile / kFragment;  // 16-row strips of a tile
// A dQ block: a warp per 16 query rows, every column of its sum. A dK/dV block: a warp per 16 kv rows and
// half the head's columns of both sums (so that at head size 128 its accumulators, 2·64 floats a thread,
// stay within the registers: the whole width would be 2·128 of the 255).
inline constexpr int kQueryThreads = 32 * kRowBlocks;
inline constexpr int kKeyColumnHalves = 2;
inline constexpr int kKeyThreads = 32 * kRowBlocks * kKeyColumnHalves;

KOKKOS_INLINE_FUNCTION int tile_count(int T) { return (T + kTile - 1) / kTile; }

// The first kv tile query tile qt reads: that of its first row's document start (the earliest of the tile's).
KOKKOS_INLINE_FUNCTION int first_kv_tile(const detail::DocumentBounds& docs, int b, int qt) {
  return docs.start(b, qt * kTile) / kTile;
}

// The last query tile that reads kv tile kt: that of the end of its last key's document.
KOKKOS_INLINE_FUNCTION int last_query_tile(const detail::DocumentBounds& docs, int b, int kt) {
  const int last_key = (kt + 1) * kTile < docs.T ? (kt + 1) * kTile - 1 : docs.T - 1;
  return (docs.end(b, last_key) - 1) / kTile;
}

// Whether query i (of a sequence of T, its document starting at start_i) sees key j.
KOKKOS_INLINE_FUNCTION bool visible(int i, int j, int start_i, int T) { return i < T && j <= i && j >= start_i; }

// P_ij = exp(scale·q_i·k_j − lse_i) and dS_ij = P_ij (do_i·v_j − D_i) of one score; both 0 where hidden.
struct ScoreGradient {
  float p;
  float ds;
};
KOKKOS_INLINE_FUNCTION ScoreGradient score_gradient(float qk, float dov, float lse, float D, float scale, bool seen) {
  if (!seen) return {0.0f, 0.0f};
  const float p = fast_exp(scale * qk - lse);
  return {p, p * (dov - D)};
}

}  // namespace meshtrain::flash_mma
