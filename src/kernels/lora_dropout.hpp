// LoRA's dropout on the adapters' input (lora.dropout, PEFT's lora_dropout; share/docs/usage.md, LoRA):
//   drop(x) = x · mask / (1 − p),   mask ~ Bernoulli(1 − p) per element,
// the base product seeing x undropped. The mask is never stored: each element's bit is a Philox4x32-10 draw
// recomputed wherever forward, backward or a recomputation needs it, from
//   key     = words 0 and 1 of Philox under train.seed of the counter (step, global block, module index in
//             the family's order | "LK" << 16; the output head: module 0 of block model.layers),
//   counter = (global input column, global token index, "LD"),
// the global token index of row n of a micro-batch being first_sample · T + n (first_sample the step's index
// of its first sample, train/batch_loader.hpp; under context parallelism row n is local row n % Tl of sequence
// n / Tl, at its global position in the sequence: ContextChunks). So an element's bit depends on which sample,
// position, block, module and column it is, never on the data-, tensor- or pipeline-parallel layout, the team size or
// the thread count. An element is dropped when the draw's first 32-bit word is below round(p · 2^32).
//
// A routed expert's rows are assignments (token, expert), each expert's adapter with a dropout of its own
// (PEFT's: one nn.Dropout per expert's module). Their counter is (global input column, global token index,
// "LE" | expert << 16) under the key of module (block, the family's index of the experts' module): each row
// carries its (token, expert) pair (ids (rows, 2): global token index, global expert), which the experts'
// exchange sends with the row, so the bit is the same on whichever rank the expert computes.
//
// Size letters: N rows (B·T), in the input columns on this rank.
#pragma once

#include "core/exec.hpp"
#include "kernels/attention_segments.hpp"

#include <Random123/philox.h>

#include <cmath>
#include <cstdint>

namespace meshtrain {

// Everything one module's mask in one micro-batch is drawn from.
struct LoraDropoutMask {
  std::uint64_t key = 0;           // lora_dropout_key()
  std::uint64_t first_token = 0;   // global token index of row 0: first_sample · T
  std::uint64_t first_column = 0;  // global input column of this rank's column 0 (row-parallel: tp_rank · in)
  std::uint32_t threshold = 0;     // a draw below it drops its element: round(p · 2^32)
  double scale = 1;                // 1 / (1 − p), what a kept element is multiplied by
  // Context parallelism: where a rank's rows of each sequence of seq_len positions sit (default: all of them).
  ContextChunks chunks = {};
  std::uint64_t seq_len = 0;

  // The global token index of row n of the micro-batch.
  KOKKOS_INLINE_FUNCTION std::uint64_t token(std::uint64_t n) const {
    if (chunks.rows == 0) return first_token + n;
    const std::uint64_t local = std::uint64_t(chunks.local_rows());
    return first_token + n / local * seq_len + std::uint64_t(chunks.position(int(n % local)));
  }
  // Whether element (row n, local column c) is kept.
  KOKKOS_INLINE_FUNCTION bool keeps(std::uint64_t n, std::uint64_t c) const {
    return kept_draw(token(n), first_column + c, 0x4C44u /* "LD" */);
  }
  // Whether local column c of the row that is assignment (global token, global expert) is kept.
  KOKKOS_INLINE_FUNCTION bool keeps_assignment(std::uint64_t token, std::uint64_t expert, std::uint64_t c) const {
    return kept_draw(token, first_column + c, 0x4C45u /* "LE" */ | std::uint32_t(expert << 16));
  }

 private:
  KOKKOS_INLINE_FUNCTION bool kept_draw(std::uint64_t token, std::uint64_t column, std::uint32_t tag) const {
    using Philox = r123::Philox4x32;
    const Philox::ctr_type counter = {{std::uint32_t(column), std::uint32_t(token), std::uint32_t(token >> 32), tag}};
    const Philox::key_type k = {{std::uint32_t(key), std::uint32_t(key >> 32)}};
    return Philox()(counter, k)[0] >= threshold;
  }
};

// Which row a mask is applied to: row n of a micro-batch (its token first_token + n), or row n of a routed
// expert's rows, the assignment ids(n, ·) (see above).
struct TokenRows {
  LoraDropoutMask mask;
  KOKKOS_INLINE_FUNCTION bool keeps(long n, long c) const { return mask.keeps(std::uint64_t(n), std::uint64_t(c)); }
};
struct AssignmentRows {
  LoraDropoutMask mask;
  CVec<std::int64_t> ids;  // (rows, 2): global token index, global expert
  KOKKOS_INLINE_FUNCTION bool keeps(long n, long c) const {
    return mask.keeps_assignment(std::uint64_t(ids(2 * n)), std::uint64_t(ids(2 * n + 1)), std::uint64_t(c));
  }
};

// The Philox key of one module's mask in one step, itself a Philox draw under the seed: each step, block and
// module draws its mask from a stream of its own, apart from the initialisation's and the data order's
// (keyed by the seed itself).
inline std::uint64_t lora_dropout_key(std::uint64_t seed, std::int64_t step, int block, int module) {
  using Philox = r123::Philox4x32;
  const Philox::ctr_type counter = {{std::uint32_t(step), std::uint32_t(std::uint64_t(step) >> 32),
                                     std::uint32_t(block), std::uint32_t(module) | 0x4C4B0000u /* "LK" */}};
  const Philox::key_type key = {{std::uint32_t(seed), std::uint32_t(seed >> 32)}};
  const Philox::ctr_type bits = Philox()(counter, key);
  return (std::uint64_t(bits[1]) << 32) | bits[0];
}

// `chunks`: a context-parallel rank's rows of each sequence (default: every row, in order).
inline LoraDropoutMask lora_dropout_mask(double p, std::uint64_t seed, std::int64_t step, std::uint64_t first_sample,
                                         int seq_len, int block, int module, std::uint64_t first_column,
                                         const ContextChunks& chunks = {}) {
  const double threshold = std::round(std::ldexp(p, 32));
  return {lora_dropout_key(seed, step, block, module),
          first_sample * std::uint64_t(seq_len),
          first_column,
          std::uint32_t(std::fmin(threshold, 4294967295.0)),
          1.0 / (1.0 - p),
          chunks,
          std::uint64_t(seq_len)};
}

// out (N, in; contiguous) = drop(x), x (N, in; row stride ldx); `rows` TokenRows or AssignmentRows.
template <class Real, class Rows>
void lora_dropout_forward(const ExecSpace& space, Vec<Real> out, const Real* x, int ldx, const Rows& rows, int N,
                          int in, const char* name) {
  static_assert(reachable_v<Vec<Real>>);
  using A = accum_t<Real>;
  const A scale = A(rows.mask.scale);
  Kokkos::parallel_for(
      name, Kokkos::RangePolicy<ExecSpace>(space, 0, long(N) * in), KOKKOS_LAMBDA(long i) {
        const long n = i / in, c = i % in;
        out(i) = rows.keeps(n, c) ? Real(A(x[n * ldx + c]) * scale) : Real(0);
      });
}
template <class Real>
void lora_dropout_forward(const ExecSpace& space, Vec<Real> out, const Real* x, int ldx, const LoraDropoutMask& mask,
                          int N, int in) {
  lora_dropout_forward<Real>(space, out, x, ldx, TokenRows{mask}, N, in, "meshtrain::lora_dropout::forward");
}

// dx (N, in; row stride lddx) += drop(g), g (N, in; contiguous): the gradient through the dropout.
template <class Real, class Rows>
void lora_dropout_backward(const ExecSpace& space, Real* dx, int lddx, CVec<Real> g, const Rows& rows, int N, int in,
                           const char* name) {
  static_assert(reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  const A scale = A(rows.mask.scale);
  Kokkos::parallel_for(
      name, Kokkos::RangePolicy<ExecSpace>(space, 0, long(N) * in), KOKKOS_LAMBDA(long i) {
        const long n = i / in, c = i % in;
        if (rows.keeps(n, c)) dx[n * lddx + c] = Real(A(dx[n * lddx + c]) + A(g(i)) * scale);
      });
}
template <class Real>
void lora_dropout_backward(const ExecSpace& space, Real* dx, int lddx, CVec<Real> g, const LoraDropoutMask& mask, int N,
                           int in) {
  lora_dropout_backward<Real>(space, dx, lddx, g, TokenRows{mask}, N, in, "meshtrain::lora_dropout::backward");
}

// The assignment ids (R, 2) of the expert-ordered rows: row slot(n, j) is token n's j-th choice expert(n, j),
// global token index tokens.token(n) (slot −1: dropped by the capacity, no row); `tokens` any of the
// micro-batch's masks (they share first_token and chunks).
inline void lora_assignment_ids(const ExecSpace& space, Vec<std::int64_t> ids, CVec<int> slot, CVec<int> expert,
                                const LoraDropoutMask& tokens, int N, int k) {
  static_assert(reachable_v<Vec<std::int64_t>>);
  Kokkos::parallel_for(
      "meshtrain::lora_dropout::assignment_ids", Kokkos::RangePolicy<ExecSpace>(space, 0, long(N) * k),
      KOKKOS_LAMBDA(long i) {
        const int row = slot(i);
        if (row < 0) return;
        ids(2L * row) = std::int64_t(tokens.token(std::uint64_t(i / k)));
        ids(2L * row + 1) = expert(i);
      });
}

}  // namespace meshtrain
