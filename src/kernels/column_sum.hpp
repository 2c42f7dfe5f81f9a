// Column sums over many rows, spread over the whole device and bitwise the same on every backend:
// the one scheme the bias, LayerNorm/RMSNorm parameter and position-embedding gradients share.
//
// Sizes: N rows, C columns, S sums per column (LayerNorm: the weight's and the bias's).
//   out[s][c] += Σ_n term(n, c)[s]
//
// Phase 1: one team per (chunk of kColumnSumRows rows × block of kColumnSumBlock columns) sums
// its rows in row order into team scratch (each row one contiguous run of the block, what the host
// vectorises) and writes one partial sum per column and chunk. Phase 2, in the same launch: the last
// team to finish (kernels/column_sum_ticket.hpp: every team fences its partials, then takes a ticket)
// adds the chunks' partials of every column in chunk order. Chunk 0 starts from the gradient's current
// value, so a sum of at most kColumnSumRows rows is the row-order sum the kernels computed before this
// scheme, and needs no workspace. Either way one launch, whichever N. The chunk size is a constant: the order of every
// addition depends on N alone, never on the team size, the thread count or the backend, so the sums are bitwise
// reproducible across teams and threads (tests/kernels: column_sums_bitwise_across_teams) and add in the same order on
// every backend — what exact resumption relies on. No atomics. Sums run in accum_t<Real> (float for 16-bit Real) and
// are rounded to Real once. row_sweep_column_sums (below) adds the same sums in the same order from a row-wise kernel
// (the norms' backward), so a row kernel and its column sums are one launch plus the combination.
#pragma once

#include "core/exec.hpp"
#include "kernels/column_sum_ticket.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

namespace meshtrain {

// Rows per chunk: fixes the order of the additions (a chunk's rows in order, then the chunks in
// order). 128 rows keep a GPU's teams many (N/128 × C/64) and the partials small (C per 128 rows).
inline constexpr int kColumnSumRows = 128;
// Columns per team. Any width gives the same sums; 64 keeps each row's run one vector loop on a host.
inline constexpr int kColumnSumBlock = 64;

constexpr std::size_t column_sum_chunks(std::size_t N) { return (N + kColumnSumRows - 1) / kColumnSumRows; }

// Elements of accum_t<Real> the partial sums of N rows × C columns × S sums need: none for one chunk.
constexpr std::size_t column_sum_workspace(std::size_t N, std::size_t C, std::size_t S = 1) {
  return column_sum_chunks(N) > 1 ? column_sum_chunks(N) * C * S : 0;
}

namespace detail {

// A caller's workspace too small for N rows × C columns × S sums: std::logic_error naming `label`.
inline void require_workspace(const std::string& label, std::size_t elements, long N, int C, int S) {
  const std::size_t needed = column_sum_workspace(std::size_t(N), std::size_t(C), std::size_t(S));
  if (elements < needed) {
    throw std::logic_error(label + ": column-sum workspace of " + std::to_string(elements) + " elements, " +
                           std::to_string(needed) + " needed");
  }
}

// Phase 2, by every thread of each of the launch's `teams` teams once it has written its partials: the
// last team to get here sets out[s](c) = Real(Σ_k partials[k][s][c]), the chunks in order (chunk 0 holds
// out's start), and puts the ticket back to zero for the next launch.
template <int S, class Real, class Team>
KOKKOS_INLINE_FUNCTION void combine_if_last(const Team& team, const ColumnSumTicket& ticket,
                                            const Kokkos::Array<Vec<Real>, S>& out, const Vec<accum_t<Real>>& partials,
                                            long teams, long chunks, int C) {
  using A = accum_t<Real>;
  Kokkos::memory_fence();  // a fence orders its own thread's writes: every thread's partials, then the ticket
  team.team_barrier();
  int last = 0;
  Kokkos::single(
      Kokkos::PerTeam(team),
      [&](int& is_last) { is_last = Kokkos::atomic_fetch_add(&ticket(0), 1u) == unsigned(teams - 1); }, last);
  if (!last) return;
  Kokkos::memory_fence();
  // Read past any cache line of this multiprocessor that predates the other teams' writes.
  const volatile A* const sums = partials.data();
  const long stride = long(S) * C;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, stride), [&](const long j) {
    A value = sums[j];
    for (long k = 1; k < chunks; ++k) value += sums[k * stride + j];
    out[j / C](j % C) = Real(value);
  });
  Kokkos::single(Kokkos::PerTeam(team), [&]() { ticket(0) = 0u; });
}

}  // namespace detail

// out[s] (C each) accumulates (+=) Σ_n term(n, c)[s], term returning Kokkos::Array<accum_t<Real>, S>;
// partials holds at least column_sum_workspace(N, C, S) elements. term is
// called once per (n, c), in phase 1, so it may also write element (n, c) of an output of its own
// (gelu_backward_bias writes the input gradient whose column sums it returns). One launch, labelled
// `label`.
template <int S, class Real, class Term>
void column_sums(const ExecSpace& space, const std::string& label, Kokkos::Array<Vec<Real>, S> out,
                 Vec<accum_t<Real>> partials, long N, int C, Term term) {
  static_assert(reachable_v<Vec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Scratch = Kokkos::View<A*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const long chunks = long(column_sum_chunks(std::size_t(N)));
  if (N <= 0 || C <= 0) return;
  detail::require_workspace(label, partials.extent(0), N, C, S);
  const int blocks = (C + kColumnSumBlock - 1) / kColumnSumBlock;
  const long stride = long(S) * C;  // one chunk's partials
  const ColumnSumTicket ticket = chunks > 1 ? column_sum_ticket() : ColumnSumTicket();
  // Every block of a chunk holds a ticket: the last of chunks × blocks teams combines.
  const long teams = chunks * blocks;
  Kokkos::parallel_for(
      label,
      team_policy(space, int(chunks * blocks))
          .set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(S * kColumnSumBlock))),
      KOKKOS_LAMBDA(const Team& team) {
        const long k = team.league_rank() / blocks;
        const int c0 = (team.league_rank() % blocks) * kColumnSumBlock;
        const int c1 = c0 + kColumnSumBlock < C ? c0 + kColumnSumBlock : C;
        const long n0 = k * kColumnSumRows;
        const long n1 = n0 + kColumnSumRows < N ? n0 + kColumnSumRows : N;
        Scratch sum(team.team_scratch(0), S * kColumnSumBlock);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1), [&](int c) {
          for (int s = 0; s < S; ++s) sum(s * kColumnSumBlock + c - c0) = k == 0 ? A(out[s](c)) : A(0);
        });
        team.team_barrier();
        for (long n = n0; n < n1; ++n) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1), [&](int c) {
            const Kokkos::Array<A, S> t = term(n, c);
            for (int s = 0; s < S; ++s) sum(s * kColumnSumBlock + c - c0) += t[s];
          });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1), [&](int c) {
          for (int s = 0; s < S; ++s) {
            const A value = sum(s * kColumnSumBlock + c - c0);
            if (chunks == 1) {
              out[s](c) = Real(value);
            } else {
              partials(k * stride + long(s) * C + c) = value;
            }
          }
        });
        if (chunks > 1) detail::combine_if_last<S, Real>(team, ticket, out, partials, teams, chunks, C);
      });
}

// Row kernels that also sum columns (the norms' backward: each row's input gradient needs the whole
// row, the weight gradients are column sums of terms of the same row): one team per chunk of
// kColumnSumRows rows calls row(team, n, sums) for its rows in order, and row adds each column's
// terms for row n into sums(s, c) (over TeamThreadRange(team, C), so a column's sums stay with one
// thread). The sums start, end and combine as in column_sums: the same order of additions, the
// same bits, in one launch. The sums of a team live in its
// scratch (level 0 when they fit half of it, else level 1).
template <int S, class Real>
struct ColumnSumsOfRows {
  using A = accum_t<Real>;
  using Scratch = Kokkos::View<A*, ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Scratch sums;
  int C;
  KOKKOS_INLINE_FUNCTION A& operator()(int s, int c) const { return sums(long(s) * C + c); }
};

// out[s] (C each) accumulates (+=) the sums row(team, n, sums) adds, n = 0 … N−1; partials holds at
// least column_sum_workspace(N, C, S) elements. One launch, labelled `label`.
template <int S, class Real, class Row>
void row_sweep_column_sums(const ExecSpace& space, const std::string& label, Kokkos::Array<Vec<Real>, S> out,
                           Vec<accum_t<Real>> partials, long N, int C, Row row) {
  static_assert(reachable_v<Vec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Sums = ColumnSumsOfRows<S, Real>;
  const long chunks = long(column_sum_chunks(std::size_t(N)));
  if (N <= 0 || C <= 0) return;
  detail::require_workspace(label, partials.extent(0), N, C, S);
  const std::size_t bytes = Sums::Scratch::shmem_size(std::size_t(S) * C);
  const int level = bytes * 2 <= std::size_t(Kokkos::TeamPolicy<ExecSpace>::scratch_size_max(0)) ? 0 : 1;
  const long stride = long(S) * C;
  const ColumnSumTicket ticket = chunks > 1 ? column_sum_ticket() : ColumnSumTicket();
  Kokkos::parallel_for(
      label, team_policy(space, int(chunks)).set_scratch_size(level, Kokkos::PerTeam(bytes)),
      KOKKOS_LAMBDA(const Team& team) {
        const long k = team.league_rank();
        const Sums sums{typename Sums::Scratch(team.team_scratch(level), std::size_t(S) * C), C};
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          for (int s = 0; s < S; ++s) sums(s, c) = k == 0 ? A(out[s](c)) : A(0);
        });
        team.team_barrier();
        const long n1 = (k + 1) * kColumnSumRows < N ? (k + 1) * kColumnSumRows : N;
        for (long n = k * kColumnSumRows; n < n1; ++n) row(team, n, sums);
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          for (int s = 0; s < S; ++s) {
            if (chunks == 1) {
              out[s](c) = Real(sums(s, c));
            } else {
              partials(k * stride + long(s) * C + c) = sums(s, c);
            }
          }
        });
        if (chunks > 1) detail::combine_if_last<S, Real>(team, ticket, out, partials, chunks, chunks, C);
      });
}

}  // namespace meshtrain
