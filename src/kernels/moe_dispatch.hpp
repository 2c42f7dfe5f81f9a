// Moving tokens to their experts and back (share/docs/usage.md, Mixture of experts: capacity and
// its priority rule, the output y = Σ_{kept j} g_j · FFN_{e_j}(x')).
//
// Sizes: N tokens, k experts per token, E experts, C channels, R rows kept in all. Assignment (n, j)
// is token n's j-th choice, expert[n·k + j]. Rows are expert-major: expert e's kept assignments are
// rows [offsets[e], offsets[e+1]), so that each expert's FFN is one GEMM on contiguous rows. Padded
// to a capacity (model.pad_to_capacity), expert e's rows are [e·capacity, (e+1)·capacity) instead,
// its kept assignments first and the rest padding rows (row_token −1: zero rows), so that every
// row count is known before the routing; offsets stay the kept rows' prefix sums (the statistics').
//   priority inside an expert: every choice j = 0 by token ascending, then j = 1, …  (GShard)
//   slot[n·k + j] = the row of assignment (n, j), −1 when capacity dropped it
//   permute:  xs[r,:] = x[row_token[r],:]
//   combine:  out[n,:] (=, +=) Σ_{j kept} gate[n,j] · ys[slot[n,j],:]
//   backward: dys[slot[n,j],:] = gate[n,j] · dout[n,:],  dgate[n,j] = dout[n,:] · ys[slot[n,j],:]
//             dx[n,:] (=, +=) Σ_{j kept} dxs[slot[n,j],:]
// The gathers sum in choice order j in accum_t<Real> and round once; every kernel writes each output
// from one thread or team, so results are the same bits every run (no atomics).
#pragma once

#include "core/exec.hpp"

#include <type_traits>

namespace meshtrain {

namespace detail {

// The assignment at position q of the priority order (choice-major): token q mod N, choice q / N.
KOKKOS_INLINE_FUNCTION long assignment_at(long q, int N, int k) { return (q % N) * k + q / N; }

// routed[e] = assignments of expert e, one team per expert counting over all N·k.
inline void moe_count(const ExecSpace& space, Vec<int> routed, CVec<int> expert, int N, int E, int k) {
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const long assignments = static_cast<long>(N) * k;
  Kokkos::parallel_for(
      "meshtrain::moe_dispatch::count", team_policy(space, E), KOKKOS_LAMBDA(const Team& team) {
        const int e = team.league_rank();
        int count = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, assignments), [&](long i, int& acc) { acc += expert(i) == e ? 1 : 0; },
            count);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { routed(e) = count; });
      });
}

// offsets[e] = Σ_{e' < e} kept(e'), offsets[E] = R; kept(e) = routed[e], or at most `capacity`;
// kept_counts[e] = kept(e) as well where given (not empty).
inline void moe_offsets(const ExecSpace& space, Vec<int> offsets, Vec<std::int64_t> kept_counts, CVec<int> routed,
                        int E, int capacity) {
  const bool counts = kept_counts.extent(0) > 0;
  Kokkos::parallel_scan(
      "meshtrain::moe_dispatch::offsets", Kokkos::RangePolicy<ExecSpace>(space, 0, E),
      KOKKOS_LAMBDA(int e, int& partial, const bool final) {
        const int kept = capacity > 0 && routed(e) > capacity ? capacity : routed(e);
        if (final) offsets(e) = partial;
        if (final && counts) kept_counts(e) = kept;
        partial += kept;
        if (final && e == E - 1) offsets(E) = partial;
      });
}

}  // namespace detail

// slot [N*k], routed [E], offsets [E+1] and row_token [R] are written (row_token needs R ≤ N·k, or
// R = E·capacity padded), and kept_counts [E] where given: each expert's kept rows in int64, the counts
// the expert exchange sends. capacity > 0 keeps each expert's first `capacity` assignments in priority
// order; 0 keeps all. `padded` (capacity > 0): the padded layout above.
//
// One team per expert scans all N·k assignments in priority order, twice (count, then place): O(E·N·k)
// work spread over E teams, each row's place an exclusive prefix count, no sort and no atomics.
inline void moe_assign(const ExecSpace& space, Vec<int> slot, Vec<int> row_token, Vec<int> routed, Vec<int> offsets,
                       CVec<int> expert, int N, int E, int k, int capacity, bool padded,
                       Vec<std::int64_t> kept_counts = {}) {
  static_assert(reachable_v<Vec<int>>);
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  detail::moe_count(space, routed, expert, N, E, k);
  detail::moe_offsets(space, offsets, kept_counts, routed, E, capacity);
  const long assignments = static_cast<long>(N) * k;
  Kokkos::parallel_for(
      "meshtrain::moe_dispatch::assign", team_policy(space, E), KOKKOS_LAMBDA(const Team& team) {
        const int e = team.league_rank();
        const int first_row = padded ? e * capacity : offsets(e);
        Kokkos::parallel_scan(Kokkos::TeamThreadRange(team, assignments), [&](long q, int& rank, const bool final) {
          const long a = detail::assignment_at(q, N, k);
          if (expert(a) != e) return;
          if (final) {
            const bool kept = capacity == 0 || rank < capacity;
            slot(a) = kept ? first_row + rank : -1;
            if (kept) row_token(first_row + rank) = static_cast<int>(a / k);
          }
          ++rank;
        });
        if (!padded) return;
        const int kept_rows = offsets(e + 1) - offsets(e);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kept_rows, capacity),
                             [&](int r) { row_token(first_row + r) = -1; });
      });
}

// xs [R*C] is written: row r is token row_token[r]'s row of x [N*C], zeros for a padding row (−1).
template <class Real>
void moe_permute(const ExecSpace& space, Vec<Real> xs, CVec<std::type_identity_t<Real>> x, CVec<int> row_token, int R,
                 int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<int>>);
  Kokkos::parallel_for(
      "meshtrain::moe_dispatch::permute", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(R) * C),
      KOKKOS_LAMBDA(long i) {
        const int token = row_token(i / C);
        xs(i) = token < 0 ? Real(0) : x(static_cast<long>(token) * C + i % C);
      });
}

namespace detail {

// out[n,c] (=, +=) Σ_{j: slot ≥ 0} w_j · rows[slot[n,j], c], w_j = weight[n,j], or 1 when weight is
// empty; the sum in j order in accum_t<Real>, added to out after, rounded once.
template <class Real>
void gather_assignments(const ExecSpace& space, const char* label, Vec<Real> out, CVec<Real> rows, CVec<int> slot,
                        CVec<accum_t<Real>> weight, int N, int k, int C, bool accumulate) {
  using A = accum_t<Real>;
  const bool weighted = weight.data() != nullptr;
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(N) * C), KOKKOS_LAMBDA(long i) {
        const long n = i / C, c = i % C;
        A sum = 0;
        for (int j = 0; j < k; ++j) {
          const int r = slot(n * k + j);
          if (r < 0) continue;
          const A term = rows(static_cast<long>(r) * C + c);
          sum += weighted ? weight(n * k + j) * term : term;
        }
        out(i) = Real(accumulate ? A(out(i)) + sum : sum);
      });
}

}  // namespace detail

// dx [N*C] (accumulate: +=, else =): each token's gradient summed over its kept rows of dxs.
template <class Real>
void moe_permute_backward(const ExecSpace& space, Vec<Real> dx, CVec<std::type_identity_t<Real>> dxs, CVec<int> slot,
                          int N, int k, int C, bool accumulate) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<int>>);
  detail::gather_assignments<Real>(space, "meshtrain::moe_dispatch::permute_backward", dx, dxs, slot, {}, N, k, C,
                                   accumulate);
}

// out [N*C] (accumulate: +=, else =): the gate-weighted sum of each token's expert outputs ys [R*C].
template <class Real>
void moe_combine(const ExecSpace& space, Vec<Real> out, CVec<std::type_identity_t<Real>> ys, CVec<int> slot,
                 CVec<accum_t<std::type_identity_t<Real>>> gate, int N, int k, int C, bool accumulate) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<int>>);
  detail::gather_assignments<Real>(space, "meshtrain::moe_dispatch::combine", out, ys, slot, gate, N, k, C, accumulate);
}

// dys [R*C] and dgate [N*k] are written (=); a dropped assignment's dgate is 0. One team per
// assignment: it scatters gate · dout into its row and reduces dout · ys over the channels. A padded
// layout's padding rows are not written here (moe_zero_padding).
template <class Real>
void moe_combine_backward(const ExecSpace& space, Vec<Real> dys, Vec<accum_t<std::type_identity_t<Real>>> dgate,
                          CVec<std::type_identity_t<Real>> dout, CVec<std::type_identity_t<Real>> ys, CVec<int> slot,
                          CVec<accum_t<std::type_identity_t<Real>>> gate, int N, int k, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<int>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::moe_dispatch::combine_backward", team_policy(space, N * k), KOKKOS_LAMBDA(const Team& team) {
        const int a = team.league_rank();
        const int r = slot(a);
        if (r < 0) {
          Kokkos::single(Kokkos::PerTeam(team), [&]() { dgate(a) = 0; });
          return;
        }
        const long token_row = static_cast<long>(a / k) * C, expert_row = static_cast<long>(r) * C;
        const A g = gate(a);
        A dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, C),
            [&](int c, A& acc) {
              const A d = dout(token_row + c);
              dys(expert_row + c) = Real(g * d);
              acc += d * A(ys(expert_row + c));
            },
            dot);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { dgate(a) = dot; });
      });
}

// The padding rows (row_token −1) of rows [R*C] set to zero: backward's row gradients, which the experts'
// backward multiplies by their (zero) inputs but whose NaN or Inf would still poison the products.
template <class Real>
void moe_zero_padding(const ExecSpace& space, Vec<Real> rows, CVec<int> row_token, int R, int C) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<int>>);
  Kokkos::parallel_for(
      "meshtrain::moe_dispatch::zero_padding", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(R) * C),
      KOKKOS_LAMBDA(long i) {
        if (row_token(i / C) < 0) rows(i) = Real(0);
      });
}

}  // namespace meshtrain
