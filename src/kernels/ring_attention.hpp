// Ring attention for context parallelism (parallel.cp; issue 43, part 2): each of cp ranks holds T / cp
// positions of every sequence, in two load-balanced chunks of S = T / (2·cp) rows (rank i: chunks i and
// 2cp − 1 − i, so that every rank's queries see about as many keys under the causal mask), and the
// ranks pass their keys and values around a ring. These kernels are one rank's share of one step of
// that ring: its queries against one block of keys and values (its own, or a peer's), with the mask
// of kernels/flash_attention.hpp in global positions — query at position p sees the keys at positions
// start(p) ≤ j ≤ p, start(p) its document's first (AttentionSegments over the whole sequence).
//
// Forward: a block's partial attention o_b, lse_b of each query row is merged into running ones by their
// log-sum-exp,  lse = log(e^lse_a + e^lse_b),  o = e^(lse_a − lse) o_a + e^(lse_b − lse) o_b,  so that after
// every block the rows hold the attention over all keys: what the fused kernel gives on the whole sequence.
// Backward: with that final lse and D_i = do_i·o_i, each block's P_ij = exp(s_ij − lse_i) is the whole
// softmax's, so dq_i = scale Σ_j dS_ij k_j adds up over the blocks, and a block's dk_j, dv_j (summed over
// the query heads of its kv head and this rank's queries) travel back to the keys' owner, who adds the
// ranks' parts.
//
// Layouts (B sequences, Tl = 2S local rows each): qkv [B, Tl, (NH + 2KVH)·hs] as the fused kernel's; a K/V
// block kv [B, Tl, 2·KVH·hs] (k | v of a row: only kv heads travel, GQA's narrower width); the running
// output and dq [B, Tl, NH·hs], dkv [B, Tl, 2·KVH·hs] and lse [B, NH, Tl] in accum_t<Real>.
//
// One thread per output row (a query row of one head; a key row of one kv head), every sum over keys or
// queries in position order: no atomics, the same bits for any thread count or backend. The products are
// dot products in a loop (no tiles): the host and device builds run the same code.
#pragma once

#include "core/exec.hpp"
#include "core/kokkos_compat.hpp"
#include "kernels/attention_segments.hpp"
#include "kernels/fast_math.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace meshtrain {

namespace detail {

// What both directions check and share: the document bounds, the query heads per kv head, the elements
// of a qkv row, of an output row and of a K/V block row, where v starts in a block row, the scores' scale.
template <class A>
struct RingCall {
  DocumentBounds docs;
  int Tl, g;
  long row, q_cols, kv_row, v_offset;
  A scale;

  // Of a thread index over [B, heads, Tl] (lse's layout): the sequence, the head and the local row.
  KOKKOS_INLINE_FUNCTION void split(long index, int heads, int& b, int& h, int& i) const {
    i = int(index % Tl);
    h = int(index / Tl % heads);
    b = int(index / (long(Tl) * heads));
  }
  // Where local row t of sequence b starts: in qkv, in an output (or dout, dq), in a K/V block.
  KOKKOS_INLINE_FUNCTION long qkv_at(int b, int t) const { return (long(b) * Tl + t) * row; }
  KOKKOS_INLINE_FUNCTION long out_at(int b, int t) const { return (long(b) * Tl + t) * q_cols; }
  KOKKOS_INLINE_FUNCTION long kv_at(int b, int t) const { return (long(b) * Tl + t) * kv_row; }
};

// f(t) for the local rows t of `chunks` at positions [lo, hi), in position order within each half.
template <class F>
KOKKOS_INLINE_FUNCTION void for_rows_at(const ContextChunks& chunks, int lo, int hi, const F& f) {
  for (int half = 0; half < 2; ++half) {
    int r0, r1;
    chunks.rows_in(half, lo, hi, r0, r1);
    for (int t = r0; t < r1; ++t) f(t);
  }
}

template <class A>
RingCall<A> ring_call(const char* what, int B, int T, int NH, int KVH, int hs, ContextChunks queries,
                      ContextChunks keys, const AttentionSegments& segments) {
  if (NH <= 0 || KVH <= 0 || hs <= 0 || NH % KVH != 0) {
    throw std::invalid_argument(std::string(what) + ": the kv heads (" + std::to_string(KVH) +
                                ") must divide the query heads (" + std::to_string(NH) + "), hs > 0");
  }
  for (const ContextChunks& c : {queries, keys}) {
    if (c.rows <= 0 || c.first < 0 || c.second < 0 || (c.second + 1) * c.rows > T || (c.first + 1) * c.rows > T ||
        c.rows != queries.rows) {
      throw std::invalid_argument(std::string(what) + ": chunks " + std::to_string(c.first) + " and " +
                                  std::to_string(c.second) + " of " + std::to_string(c.rows) +
                                  " rows do not lie in a sequence of " + std::to_string(T) +
                                  " positions (or differ in size from the queries')");
    }
  }
  if (segments.docs < 0 || segments.offsets.extent(0) < attention_segments_size(B, segments.docs)) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(segments.offsets.extent(0)) +
                                " segment offsets for " + std::to_string(B) + " sequences of " +
                                std::to_string(segments.docs) + " documents");
  }
  return {DocumentBounds{segments.offsets.data(), segments.docs, T},
          queries.local_rows(),
          NH / KVH,
          long(NH + 2 * KVH) * hs,
          long(NH) * hs,
          long(2 * KVH) * hs,
          long(KVH) * hs,
          A(1.0 / std::sqrt(static_cast<double>(hs)))};
}

template <class A, class X, class Y>
KOKKOS_INLINE_FUNCTION A dot(const X* x, const Y* y, int n) {
  A sum = 0;
  for (int d = 0; d < n; ++d) sum += A(x[d]) * A(y[d]);
  return sum;
}

}  // namespace detail

// Clears the running output and sets every row's lse to −∞ (no key seen yet): before a ring's first block.
template <class A>
void ring_attention_begin(const ExecSpace& space, Vec<A> out, Vec<A> lse) {
  Kokkos::deep_copy(space, out, A(0));
  Kokkos::deep_copy(space, lse, -std::numeric_limits<A>::infinity());
}

// kv [B, Tl, 2·KVH·hs] ← the k and v columns of qkv: this rank's own block, the first the ring passes on.
template <class Real>
void ring_attention_pack(const ExecSpace& space, Vec<Real> kv, CVec<std::type_identity_t<Real>> qkv, int B, int Tl,
                         int NH, int KVH, int hs) {
  const long row = long(NH + 2 * KVH) * hs, width = long(2 * KVH) * hs, first = long(NH) * hs;
  Kokkos::parallel_for(
      "meshtrain::ring_attention::pack", Kokkos::RangePolicy<ExecSpace>(space, 0, long(B) * Tl * width),
      KOKKOS_LAMBDA(long i) {
        const long t = i / width, c = i % width;
        kv(i) = qkv(t * row + first + c);
      });
}

// Folds one K/V block (`kv` at `keys`' positions) into the running output `out` and `lse` of this rank's
// queries (qkv's q columns at `queries`' positions). T is the whole sequence's length.
template <class Real>
void ring_attention_forward_block(const ExecSpace& space, Vec<accum_t<Real>> out, Vec<accum_t<Real>> lse,
                                  CVec<std::type_identity_t<Real>> qkv, ContextChunks queries,
                                  CVec<std::type_identity_t<Real>> kv, ContextChunks keys, int B, int T, int NH,
                                  int KVH, int hs, const AttentionSegments& segments) {
  using A = accum_t<Real>;
  if (B <= 0) return;
  const auto c = detail::ring_call<A>("ring_attention_forward_block", B, T, NH, KVH, hs, queries, keys, segments);
  Kokkos::parallel_for(
      "meshtrain::ring_attention::forward_block", Kokkos::RangePolicy<ExecSpace>(space, 0, long(B) * NH * c.Tl),
      KOKKOS_LAMBDA(long index) {
        int b, h, i;
        c.split(index, NH, b, h, i);
        const int p = queries.position(i), lo = c.docs.start(b, p);
        const auto* q = &qkv(c.qkv_at(b, i) + long(h) * hs);
        const long k_at = long(h / c.g) * hs;
        const auto score = [&](int j) { return c.scale * detail::dot<A>(q, &kv(c.kv_at(b, j) + k_at), hs); };
        // The block's keys this query sees: those at positions [lo, p] (none: nothing to fold in).
        A top = 0;
        bool seen = false;
        detail::for_rows_at(keys, lo, p + 1, [&](int j) {
          const A s = score(j);
          top = !seen || s > top ? s : top;
          seen = true;
        });
        if (!seen) return;
        A sum = 0;
        detail::for_rows_at(keys, lo, p + 1, [&](int j) { sum += fast_exp(score(j) - top); });
        const A before = lse(index), block = top + kmath::log(sum);
        const A hi = before > block ? before : block, low = before > block ? block : before;
        const A merged = hi + kmath::log(A(1) + fast_exp(low - hi));  // −∞ before: the block's own
        const A keep = fast_exp(before - merged);                     // 0 when nothing was seen before
        A* const o = &out(c.out_at(b, i) + long(h) * hs);
        for (int e = 0; e < hs; ++e) o[e] *= keep;
        detail::for_rows_at(keys, lo, p + 1, [&](int j) {
          const A w = fast_exp(score(j) - merged);
          const auto* v = &kv(c.kv_at(b, j) + c.v_offset + k_at);
          for (int e = 0; e < hs; ++e) o[e] += w * A(v[e]);
        });
        lse(index) = merged;
      });
}

// out [B, Tl, NH·hs] ← the running output once every block is folded in (16-bit Real rounded once).
template <class Real>
void ring_attention_end(const ExecSpace& space, Vec<Real> out, CVec<accum_t<Real>> running) {
  Kokkos::parallel_for(
      "meshtrain::ring_attention::end", Kokkos::RangePolicy<ExecSpace>(space, 0, long(out.extent(0))),
      KOKKOS_LAMBDA(long i) { out(i) = Real(running(i)); });
}

// Before the backward's blocks: d [B, NH, Tl] ← D_i = do_i·o_i of every query row and head; the running dq
// and this rank's own block's dkv (the first the ring passes on) cleared.
template <class Real>
void ring_attention_backward_begin(const ExecSpace& space, Vec<accum_t<Real>> d, Vec<accum_t<Real>> dq,
                                   Vec<accum_t<Real>> dkv, CVec<std::type_identity_t<Real>> dout,
                                   CVec<std::type_identity_t<Real>> out, int B, int Tl, int NH, int hs) {
  using A = accum_t<Real>;
  Kokkos::deep_copy(space, dq, A(0));
  Kokkos::deep_copy(space, dkv, A(0));
  const long q_cols = long(NH) * hs;
  Kokkos::parallel_for(
      "meshtrain::ring_attention::backward_begin", Kokkos::RangePolicy<ExecSpace>(space, 0, long(B) * NH * Tl),
      KOKKOS_LAMBDA(long index) {
        const int i = int(index % Tl), h = int(index / Tl % NH), b = int(index / (long(Tl) * NH));
        const long at = (long(b) * Tl + i) * q_cols + long(h) * hs;
        d(index) = detail::dot<A>(&dout(at), &out(at), hs);
      });
}

// One K/V block's share of the backward: dq [B, Tl, NH·hs] += this rank's queries' gradient through the
// block's keys; dkv [B, Tl, 2·KVH·hs] += the block's keys' and values' gradient from this rank's queries
// (to travel back to their owner). lse and d are the forward's final lse and backward_begin's D.
template <class Real>
void ring_attention_backward_block(const ExecSpace& space, Vec<accum_t<Real>> dq, Vec<accum_t<Real>> dkv,
                                   CVec<std::type_identity_t<Real>> qkv, ContextChunks queries,
                                   CVec<std::type_identity_t<Real>> kv, ContextChunks keys,
                                   CVec<std::type_identity_t<Real>> dout, CVec<accum_t<Real>> lse,
                                   CVec<accum_t<Real>> d, int B, int T, int NH, int KVH, int hs,
                                   const AttentionSegments& segments) {
  using A = accum_t<Real>;
  if (B <= 0) return;
  const auto c = detail::ring_call<A>("ring_attention_backward_block", B, T, NH, KVH, hs, queries, keys, segments);
  // dq: a thread per query row and head, over the keys it sees (positions [start, p]) in position order.
  Kokkos::parallel_for(
      "meshtrain::ring_attention::backward_dq", Kokkos::RangePolicy<ExecSpace>(space, 0, long(B) * NH * c.Tl),
      KOKKOS_LAMBDA(long index) {
        int b, h, i;
        c.split(index, NH, b, h, i);
        const int p = queries.position(i);
        const auto* q = &qkv(c.qkv_at(b, i) + long(h) * hs);
        const auto* dO = &dout(c.out_at(b, i) + long(h) * hs);
        const long k_at = long(h / c.g) * hs;
        const A l = lse(index), D = d(index);
        A* const g_q = &dq(c.out_at(b, i) + long(h) * hs);
        detail::for_rows_at(keys, c.docs.start(b, p), p + 1, [&](int j) {
          const auto* k = &kv(c.kv_at(b, j) + k_at);
          const A P = fast_exp(c.scale * detail::dot<A>(q, k, hs) - l);
          const A dS = P * (detail::dot<A>(dO, k + c.v_offset, hs) - D);
          for (int e = 0; e < hs; ++e) g_q[e] += c.scale * dS * A(k[e]);
        });
      });
  // dk, dv: a thread per key row and kv head, over the group's query heads and the queries that see it
  // (positions [its position, its document's end)) in position order.
  Kokkos::parallel_for(
      "meshtrain::ring_attention::backward_dkv", Kokkos::RangePolicy<ExecSpace>(space, 0, long(B) * KVH * c.Tl),
      KOKKOS_LAMBDA(long index) {
        int b, kvh, j;
        c.split(index, KVH, b, kvh, j);
        const int p = keys.position(j);
        const long k_at = c.kv_at(b, j) + long(kvh) * hs;
        const auto* k = &kv(k_at);
        const auto* v = k + c.v_offset;
        A* const g_k = &dkv(k_at);
        A* const g_v = g_k + c.v_offset;
        for (int h = kvh * c.g; h < (kvh + 1) * c.g; ++h) {
          detail::for_rows_at(queries, p, c.docs.end(b, p), [&](int i) {
            const auto* q = &qkv(c.qkv_at(b, i) + long(h) * hs);
            const auto* dO = &dout(c.out_at(b, i) + long(h) * hs);
            const long l_at = (long(b) * NH + h) * c.Tl + i;
            const A P = fast_exp(c.scale * detail::dot<A>(q, k, hs) - lse(l_at));
            const A dS = P * (detail::dot<A>(dO, v, hs) - d(l_at));
            for (int e = 0; e < hs; ++e) {
              g_v[e] += P * A(dO[e]);
              g_k[e] += c.scale * dS * A(q[e]);
            }
          });
        }
      });
}

// dqkv [B, Tl, (NH + 2KVH)·hs] ← dq in the q columns and this rank's own keys' and values' gradient, every
// rank's parts summed (dkv, back from the ring), in the k and v columns (16-bit Real rounded once).
template <class Real>
void ring_attention_backward_end(const ExecSpace& space, Vec<Real> dqkv, CVec<accum_t<Real>> dq,
                                 CVec<accum_t<Real>> dkv, int B, int Tl, int NH, int KVH, int hs) {
  const long row = long(NH + 2 * KVH) * hs, q_cols = long(NH) * hs, kv_row = long(2 * KVH) * hs;
  Kokkos::parallel_for(
      "meshtrain::ring_attention::backward_end", Kokkos::RangePolicy<ExecSpace>(space, 0, long(B) * Tl * row),
      KOKKOS_LAMBDA(long i) {
        const long t = i / row, col = i % row;
        dqkv(i) = Real(col < q_cols ? dq(t * q_cols + col) : dkv(t * kv_row + col - q_cols));
      });
}

}  // namespace meshtrain
