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
