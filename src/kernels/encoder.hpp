// Token and position embedding: the first layer of GPT-2.
//
// Sizes: B batch, T time, N = B*T rows, C channels, V vocabulary.
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
//   backward: dwte[v,:] += Σ_{(b,t): tokens[b,t]=v} dout[b,t,:],  dwpe[t,:] += Σ_b dout[b,t,:]
//
// The backward scatters many rows into one (a token may repeat), so it is written without atomics:
// the positions are grouped by token first (a stable sort), and every sum then runs in position
// order on every backend and every run; dwpe is kernels/column_sum.hpp's column sum over the batch.
//
// 16-bit Real: values are added in float, and each gradient row is rounded to Real once.
#pragma once

#include "core/exec.hpp"
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

template <class Real>
void encoder_forward(const ExecSpace& space, Vec<Real> out, CVec<std::int32_t> tokens,
                     CVec<std::type_identity_t<Real>> wte, CVec<std::type_identity_t<Real>> wpe, int B, int T, int C,
                     VocabRange range = {}) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>> && reachable_v<CVec<std::int32_t>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::encoder::forward", team_policy(space, B * T), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const int t = n % T;
        const long o = static_cast<long>(n) * C;
        const int row = tokens(n) - range.first;
        const bool held = row >= 0 && row < range.rows;
        const long e = static_cast<long>(held ? row : 0) * C;
        const long p = static_cast<long>(t) * C;
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

}  // namespace detail

// dwte and dwpe accumulate (+=); dout is [N*C]. An empty dwpe: a model without a position table.
// partials: encoder_backward_workspace(B, T, C) elements; token_order: token_order_workspace(B*T).
//
// dwte without a read-modify-write per token: the positions are sorted by token (stable, so each
// token's positions stay in position order), then one team per (token present × block of channels)
// sums its token's rows in position order in accum_t<Real> from dwte's current value and rounds
// once — the order the one-row-at-a-time walk had, so float and double results are those of it.
// A frequent token's rows are one serial walk per channel (as llm.c's bucketed encoder backward):
// its channels, and the other tokens, run beside it.
template <class Real>
void encoder_backward(const ExecSpace& space, Vec<Real> dwte, Vec<Real> dwpe,
                      Vec<accum_t<std::type_identity_t<Real>>> partials, Vec<std::int32_t> token_order,
                      CVec<std::type_identity_t<Real>> dout, CVec<std::int32_t> tokens, int B, int T, int C, int V,
                      VocabRange range = {}) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>> && reachable_v<CVec<std::int32_t>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Scratch = Kokkos::View<A*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const int N = B * T;
  if (token_order.extent(0) < token_order_workspace(std::size_t(N))) {
    throw std::logic_error("meshtrain::encoder::backward: token-order workspace of " +
                           std::to_string(token_order.extent(0)) + " elements, " +
                           std::to_string(token_order_workspace(std::size_t(N))) + " needed");
  }
  // Key of a position: its row of this rank's table, or K for another rank's token (sorted last).
  const int first = range.first;
  const int K = range.rows < V - first ? range.rows : (V - first > 0 ? V - first : 0);
  const auto key = KOKKOS_LAMBDA(const int n) {
    const int row = tokens(n) - first;
    return row >= 0 && row < K ? row : K;
  };
  const Vec<std::int32_t> order = detail::sort_positions_by_key(space, token_order, N, K, key);
  const int blocks = (C + kColumnSumBlock - 1) / kColumnSumBlock;
  Kokkos::parallel_for(
      "meshtrain::encoder::backward_wte",
      team_policy(space, N * blocks).set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(kColumnSumBlock))),
      KOKKOS_LAMBDA(const Team& team) {
        const int i = team.league_rank() / blocks;
        const int row = key(order(i));
        if (row == K || (i > 0 && key(order(i - 1)) == row)) return;  // not the first position of a held token
        const int c0 = (team.league_rank() % blocks) * kColumnSumBlock;
        const int c1 = c0 + kColumnSumBlock < C ? c0 + kColumnSumBlock : C;
        const long e = static_cast<long>(row) * C;
        Scratch sum(team.team_scratch(0), kColumnSumBlock);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1), [&](int c) { sum(c - c0) = A(dwte(e + c)); });
        team.team_barrier();
        for (int j = i; j < N && key(order(j)) == row; ++j) {
          const long o = static_cast<long>(order(j)) * C;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1), [&](int c) { sum(c - c0) += A(dout(o + c)); });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1), [&](int c) { dwte(e + c) = Real(sum(c - c0)); });
      });
  if (dwpe.extent(0) == 0) return;  // no position table (llama)
  // dwpe[t,c] = Σ_b dout[b,t,c]: a column sum of B rows of T·C columns.
  const long TC = static_cast<long>(T) * C;
  column_sums<1, Real>(
      space, "meshtrain::encoder::backward_wpe", {dwpe}, partials, B, int(TC),
      KOKKOS_LAMBDA(long b, int j) { return Kokkos::Array<A, 1>{A(dout(b * TC + j))}; });
}

}  // namespace meshtrain
