// Token and position embedding: the first layer of GPT-2.
//
// Sizes: B batch, T time, N = B*T rows, C channels, V vocabulary.
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[p(b,t),:]
//   backward: dwte[v,:] += Σ_{(b,t): tokens[b,t]=v} dout[b,t,:],  dwpe[q,:] += Σ_{(b,t): p(b,t)=q} dout[b,t,:]
// p(b,t) = t, or with documents (packed fine-tuning sequences, kernels/attention_segments.hpp) the position
// within t's document, t − start of t's document: each document sees the positions a sequence of its own
// would. Under context parallelism (ContextChunks) t is the global position of local row t, and T the local
// rows of a sequence; wpe covers the whole sequence.
//
// The backward scatters many rows into one (a token may repeat), so it is written without atomics:
// the positions are grouped by key first (a stable sort), and every sum then runs in position order
// on every backend and every run (detail::add_rows_by_key; dwte's key is the token, dwpe's with
// documents the position within the document). Without documents dwpe is kernels/column_sum.hpp's
// column sum over the batch.
//
// 16-bit Real: values are added in float, and each gradient row is rounded to Real once.
#pragma once

#include "core/exec.hpp"
#include "kernels/attention_segments.hpp"
#include "kernels/column_sum.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace meshtrain {

// The rows of wte this rank holds: tokens first … first + rows − 1 (vocabulary-parallel embedding
// under tensor parallelism; the defaults are the whole table). Other tokens contribute zero, and the
// tensor-parallel sum of the ranks' outputs completes the lookup, so only one rank adds wpe.
struct VocabRange {
  int first = 0;
  int rows = 2147483647;
  bool with_positions = true;
};

// The token sort of the backward: digits of 8 bits, chunks of 256 positions per counting thread.
inline constexpr int kTokenSortRadix = 256;
inline constexpr int kTokenSortChunk = 256;

// documents: the documents of each sequence, whose positions restart at 0 (none: one per sequence).
// chunks: where the T local rows of a sequence sit in it (default: they are the sequence).
template <class Real>
void encoder_forward(const ExecSpace& space, Vec<Real> out, CVec<std::int32_t> tokens,
                     CVec<std::type_identity_t<Real>> wte, CVec<std::type_identity_t<Real>> wpe, int B, int T, int C,
                     VocabRange range = {}, const AttentionSegments& documents = {}, const ContextChunks& chunks = {}) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>> && reachable_v<CVec<std::int32_t>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const detail::DocumentBounds docs{documents.offsets.data(), documents.docs, T};  // start() is 0 without documents
  Kokkos::parallel_for(
      "meshtrain::encoder::forward", team_policy(space, B * T), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const int t = chunks.position(n % T);
        const int position = t - docs.start(n / T, t);  // within t's document
        const long o = static_cast<long>(n) * C;
        const int row = tokens(n) - range.first;
        const bool held = row >= 0 && row < range.rows;
        const long e = static_cast<long>(held ? row : 0) * C;
        const long p = static_cast<long>(position) * C;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          out(o + c) = Real((held ? A(wte(e + c)) : A(0)) + (range.with_positions ? A(wpe(p + c)) : A(0)));
        });
      });
}

// Elements of int32 the embedding backward's token order needs for N = B*T rows: the positions
// grouped by token (two arrays, passes alternate between them) and each chunk's digit counts.
constexpr std::size_t token_order_workspace(std::size_t N) {
  return 2 * N + std::size_t(kTokenSortRadix) * ((N + kTokenSortChunk - 1) / kTokenSortChunk);
}

// Elements of accum_t<Real> the backward's partial sums need (dwpe: a column sum over the batch).
constexpr std::size_t encoder_backward_workspace(std::size_t B, std::size_t T, std::size_t C) {
  return column_sum_workspace(B, T * C);
}

namespace detail {

// order[0, N) := the positions n whose key(n) < K, grouped by key and in position order within a key;
// then the positions of key K (the rows other ranks hold). A stable LSD radix sort, 8 bits a pass:
// per pass, each chunk of kTokenSortChunk positions counts its digits, one exclusive scan over
// (digit, chunk) gives every chunk's first slot per digit, and each chunk places its positions in
// order. Integer counts and a serial walk per chunk: the order is the same on every backend. Returns
// the view that holds it (a window of `work`, token_order_workspace(N) elements).
template <class Key>
Vec<std::int32_t> sort_positions_by_key(const ExecSpace& space, Vec<std::int32_t> work, int N, int K, Key key) {
  const int G = (N + kTokenSortChunk - 1) / kTokenSortChunk;
  Vec<std::int32_t> a(work.data(), N), b(work.data() + N, N);
  Vec<std::int32_t> counts(work.data() + 2 * std::size_t(N), std::size_t(kTokenSortRadix) * G);
  int passes = 0;
  while (passes == 0 || (passes < 4 && (K >> (8 * passes)) != 0)) ++passes;
  for (int pass = 0; pass < passes; ++pass) {
    const Vec<std::int32_t> in = pass % 2 == 0 ? b : a;  // unread in pass 0: the positions themselves
    const Vec<std::int32_t> out = pass % 2 == 0 ? a : b;
    const int shift = 8 * pass;
    const bool first = pass == 0;
    Kokkos::parallel_for(
        "meshtrain::encoder::sort_count", Kokkos::RangePolicy<ExecSpace>(space, 0, G), KOKKOS_LAMBDA(const int g) {
          for (int d = 0; d < kTokenSortRadix; ++d) counts(d * G + g) = 0;
          const int i1 = (g + 1) * kTokenSortChunk < N ? (g + 1) * kTokenSortChunk : N;
          for (int i = g * kTokenSortChunk; i < i1; ++i) {
            const int n = first ? i : in(i);
            ++counts(((key(n) >> shift) & (kTokenSortRadix - 1)) * G + g);
          }
        });
    Kokkos::parallel_scan(
        "meshtrain::encoder::sort_scan", Kokkos::RangePolicy<ExecSpace>(space, 0, kTokenSortRadix * G),
        KOKKOS_LAMBDA(const int j, std::int32_t& before, const bool final) {
          const std::int32_t count = counts(j);
          if (final) counts(j) = before;
          before += count;
        });
    Kokkos::parallel_for(
        "meshtrain::encoder::sort_place", Kokkos::RangePolicy<ExecSpace>(space, 0, G), KOKKOS_LAMBDA(const int g) {
          const int i1 = (g + 1) * kTokenSortChunk < N ? (g + 1) * kTokenSortChunk : N;
          for (int i = g * kTokenSortChunk; i < i1; ++i) {
            const int n = first ? i : in(i);
            out(counts(((key(n) >> shift) & (kTokenSortRadix - 1)) * G + g)++) = n;
          }
        });
  }
  return passes % 2 == 1 ? a : b;
}

// dst[k,:] += Σ_{n: key(n)=k} rows[n,:] for every key k < K (dst is [K·C], rows [N·C]); positions of
// key K are skipped. No read-modify-write per position: the positions are sorted by key (stable, so
// each key's positions stay in position order), then one team per (key present × block of channels)
// sums its key's rows in position order in accum_t<Real> from dst's current value and rounds once —
// the order a one-row-at-a-time walk has, whatever the team size and thread count. A frequent key's
// rows are one serial walk per channel (as llm.c's bucketed encoder backward): its channels, and the
// other keys, run beside it. work: token_order_workspace(N) elements, free again on return.
template <class Real, class Key>
void add_rows_by_key(const ExecSpace& space, const char* label, Vec<Real> dst, Vec<std::int32_t> work,
                     CVec<std::type_identity_t<Real>> rows, int N, int C, int K, Key key) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>> && reachable_v<Vec<std::int32_t>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Scratch = Kokkos::View<A*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  if (work.extent(0) < token_order_workspace(std::size_t(N))) {
    throw std::logic_error(std::string(label) + ": token-order workspace of " + std::to_string(work.extent(0)) +
                           " elements, " + std::to_string(token_order_workspace(std::size_t(N))) + " needed");
  }
  const Vec<std::int32_t> order = sort_positions_by_key(space, work, N, K, key);
  const int blocks = (C + kColumnSumBlock - 1) / kColumnSumBlock;
  Kokkos::parallel_for(
      label, team_policy(space, N * blocks).set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(kColumnSumBlock))),
      KOKKOS_LAMBDA(const Team& team) {
        const int i = team.league_rank() / blocks;
        const int k = key(order(i));
        if (k == K || (i > 0 && key(order(i - 1)) == k)) return;  // not the first position of a summed key
        const int c0 = (team.league_rank() % blocks) * kColumnSumBlock;
        const int c1 = c0 + kColumnSumBlock < C ? c0 + kColumnSumBlock : C;
        const long e = static_cast<long>(k) * C;
        Scratch sum(team.team_scratch(0), kColumnSumBlock);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1), [&](int c) { sum(c - c0) = A(dst(e + c)); });
        team.team_barrier();
        for (int j = i; j < N && key(order(j)) == k; ++j) {
          const long o = static_cast<long>(order(j)) * C;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1), [&](int c) { sum(c - c0) += A(rows(o + c)); });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1), [&](int c) { dst(e + c) = Real(sum(c - c0)); });
      });
}

}  // namespace detail

// dwte and dwpe accumulate (+=); dout is [N*C]. An empty dwpe: a model without a position table.
// partials: encoder_backward_workspace(B, T, C) elements; token_order: token_order_workspace(B*T), used by
// dwte's sum and then by dwpe's with documents. documents: as in encoder_forward; with them, a position's
// row of wpe depends on its document, so dwpe is a sum by key (the position within the document), not a
// column sum over the batch (under context parallelism one for each chunk, into its rows of dwpe). Both are
// bitwise the same whatever the team size and thread count. chunks: as in encoder_forward.
template <class Real>
void encoder_backward(const ExecSpace& space, Vec<Real> dwte, Vec<Real> dwpe,
                      Vec<accum_t<std::type_identity_t<Real>>> partials, Vec<std::int32_t> token_order,
                      CVec<std::type_identity_t<Real>> dout, CVec<std::int32_t> tokens, int B, int T, int C, int V,
                      VocabRange range = {}, const AttentionSegments& documents = {},
                      const ContextChunks& chunks = {}) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>> && reachable_v<CVec<std::int32_t>>);
  using A = accum_t<Real>;
  const int N = B * T;
  // Key of a position: its row of this rank's table, or K for another rank's token (not summed here).
  const int first = range.first;
  const int K = range.rows < V - first ? range.rows : (V - first > 0 ? V - first : 0);
  detail::add_rows_by_key<Real>(
      space, "meshtrain::encoder::backward_wte", dwte, token_order, dout, N, C, K, KOKKOS_LAMBDA(const int n) {
        const int row = tokens(n) - first;
        return row >= 0 && row < K ? row : K;
      });
  if (dwpe.extent(0) == 0) return;  // no position table (llama)
  if (documents.docs > 0) {
    // dwpe[q,c] = Σ_{n: p(n)=q} dout[n,c], q = t − start of t's document < the table's rows.
    const detail::DocumentBounds docs{documents.offsets.data(), documents.docs, T};
    detail::add_rows_by_key<Real>(
        space, "meshtrain::encoder::backward_wpe", dwpe, token_order, dout, N, C, chunks.positions(T),
        KOKKOS_LAMBDA(const int n) {
          const int t = chunks.position(n % T);
          return t - docs.start(n / T, t);
        });
    return;
  }
  // dwpe[t,c] = Σ_b dout[b,t,c]: a column sum of B rows of T·C columns; under context parallelism one
  // for each chunk's rows·C columns, into the chunk's rows of dwpe.
  const long TC = static_cast<long>(T) * C;
  const auto add_positions = [&](int first_row, int rows, int position) {
    const long offset = long(first_row) * C;
    const Vec<Real> into(dwpe.data() + std::size_t(position) * C, std::size_t(rows) * C);
    column_sums<1, Real>(
        space, "meshtrain::encoder::backward_wpe", {into}, partials, B, rows * C,
        KOKKOS_LAMBDA(long b, int j) { return Kokkos::Array<A, 1>{A(dout(b * TC + offset + j))}; });
  };
  if (!chunks.split()) return add_positions(0, T, 0);
  add_positions(0, chunks.rows, chunks.position(0));
  add_positions(chunks.rows, chunks.rows, chunks.position(chunks.rows));
}

}  // namespace meshtrain
