// The documents of packed sequences (fine-tuning data packs several into one sequence): where each
// starts, for the fused attention's document mask (kernels/flash_attention.hpp) and the positions that
// restart at each document: rotary angles (kernels/rotary.hpp) and GPT-2's position table
// (kernels/encoder.hpp).
#pragma once

#include "core/exec.hpp"

#include <cstddef>

namespace meshtrain {

// The documents of packed sequences, as per-sequence offsets (FlashAttention's and cuDNN's ragged
// `cu_seqlens`, restarted at each sequence). For sequence b, offsets[b·(docs+1) + d], d = 0..docs, are
// non-decreasing with offsets[b·(docs+1)] = 0 and offsets[b·(docs+1) + docs] = T; document d holds
// positions [offsets_d, offsets_{d+1}). A sequence with fewer documents repeats T (empty documents).
// docs = 0 (and no offsets): one document per sequence, plain causal attention. cuDNN's ragged layout
// takes document d of sequence b as batch entry b·docs + d of length offsets_{d+1} − offsets_d, starting
// at token b·T + offsets_d.
struct AttentionSegments {
  CVec<int> offsets;  // [B·(docs+1)] in the execution space's memory
  int docs = 0;
};

// Elements of offsets that B sequences of at most `docs` documents take.
constexpr std::size_t attention_segments_size(int B, int docs) {
  return docs > 0 ? std::size_t(B) * std::size_t(docs + 1) : 0;
}

// Where the local rows of each sequence sit in it. Context parallelism (parallel.cp, kernels/ring_attention.hpp)
// gives a rank two load-balanced chunks of `rows` positions: local rows [0, rows) at chunk `first`'s positions
// [first·rows, (first+1)·rows), rows [rows, 2·rows) at chunk `second`'s. Default-constructed (rows 0): the local
// rows are the whole sequence, in order. The position kernels (rotary, GPT-2's position table) read it so that
// a rank's rows take their global positions.
struct ContextChunks {
  int rows = 0;
  int first = 0, second = 0;

  // Rank `rank` of `cp`'s chunks of a sequence of T positions (T a multiple of 2·cp).
  static ContextChunks of_rank(int rank, int cp, int T) { return {T / (2 * cp), rank, 2 * cp - 1 - rank}; }
  bool split() const { return rows > 0; }
  // The whole sequence's positions when a sequence has T local rows (of_rank's chunks: 2·cp·rows).
  int positions(int T) const { return rows == 0 ? T : (first + second + 1) * rows; }
  KOKKOS_INLINE_FUNCTION int local_rows() const { return 2 * rows; }
  KOKKOS_INLINE_FUNCTION int chunk(int half) const { return half == 0 ? first : second; }
  KOKKOS_INLINE_FUNCTION int position(int r) const {
    if (rows == 0) return r;
    return r < rows ? first * rows + r : second * rows + r - rows;
  }
  // The local rows of half h (0, 1) whose positions lie in [lo, hi): [r0, r1), empty when r0 ≥ r1.
  KOKKOS_INLINE_FUNCTION void rows_in(int half, int lo, int hi, int& r0, int& r1) const {
    const int p0 = chunk(half) * rows;
    const int a = lo > p0 ? lo : p0, b = hi < p0 + rows ? hi : p0 + rows;
    r0 = half * rows + (a - p0);
    r1 = half * rows + (b - p0);
  }
};

namespace detail {

// Where a position's document starts and ends (AttentionSegments), found by bisection. The offsets are
// held by address (AttentionSegments::offsets.data()), so that CUDA kernels outside Kokkos
// (kernels/flash_attention_mma.cpp) walk documents with the same code.
struct DocumentBounds {
  const int* offsets;
  int docs;
  int T;

  // The first position of t's document: the largest offset ≤ t.
  KOKKOS_INLINE_FUNCTION int start(int b, int t) const {
    if (docs == 0) return 0;
    int lo = 0, hi = docs;
    bisect(b, t, lo, hi);
    return offsets[long(b) * (docs + 1) + lo];
  }
  // One past the last position of t's document: the smallest offset > t.
  KOKKOS_INLINE_FUNCTION int end(int b, int t) const {
    if (docs == 0) return T;
    int lo = 0, hi = docs;
    bisect(b, t, lo, hi);
    return offsets[long(b) * (docs + 1) + hi];
  }
  // Narrows [lo, hi] to hi = lo + 1 keeping offsets_lo ≤ t < offsets_hi (offsets_0 = 0, offsets_docs = T).
  KOKKOS_INLINE_FUNCTION void bisect(int b, int t, int& lo, int& hi) const {
    const long base = long(b) * (docs + 1);
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (offsets[base + mid] <= t) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
  }
};

}  // namespace detail

}  // namespace meshtrain
