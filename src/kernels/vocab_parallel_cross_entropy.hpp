// Cross-entropy over logits split by vocabulary across tensor-parallel ranks (Megatron's
// vocab-parallel cross-entropy): the full logits are never gathered.
//
// Sizes: N rows, Vl local columns (this rank's vocabulary rows of wte, padded), of which the first
// `valid` are real tokens first … first + valid − 1; padding columns take no part.
//   1. row_max:        m_n = max_v logit[n,v]              → all-reduce max over tp
//   2. row_partials:   s_n = Σ_v exp(logit − m_n), z_n = logit[n, target] if held here, else 0
//                                                            → all-reduce sum over tp (s and z)
//   3. finish:         loss_n = log s_n + m_n − z_n,  dlogit = (exp(logit − m_n)/s_n − [v = target])·scale
// A row whose target is negative (kNoLossTarget, kernels/cross_entropy.hpp) carries no loss and no
// rank holds its target: s_n = z_n = 0 (never used), loss_n = 0, dlogit[n,:] = 0.
// With one rank this is softmax_cross_entropy in three passes.
#pragma once

#include "core/exec.hpp"
#include "kernels/fast_math.hpp"

#include <cstdint>
#include <type_traits>

namespace meshtrain {

struct VocabColumns {
  int local;  // Vl: columns in the local logits
  int valid;  // real vocabulary columns among them (the rest is padding)
  int first;  // global token of column 0
};

// maxes, partials and losses are per-row statistics, kept in accum_t<Real> (float for 16-bit logits).
template <class Real>
void vocab_parallel_row_max(const ExecSpace& space, Vec<accum_t<Real>> maxes, CVec<Real> logits, int N,
                            VocabColumns cols) {
  static_assert(reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::vocab_parallel_cross_entropy::row_max", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * cols.local;
        A m;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, cols.valid),
            [&](int v, A& acc) {
              if (A(logits(row + v)) > acc) acc = logits(row + v);
            },
            Kokkos::Max<A>(m));
        Kokkos::single(Kokkos::PerTeam(team), [&]() { maxes(n) = m; });
      });
}

// partials holds s (N values) then z (N values), so one all-reduce carries both.
template <class Real>
void vocab_parallel_row_partials(const ExecSpace& space, Vec<accum_t<Real>> partials, CVec<Real> logits,
                                 CVec<accum_t<Real>> maxes, CVec<std::int32_t> targets, int N, VocabColumns cols) {
  static_assert(reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::vocab_parallel_cross_entropy::row_partials", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * cols.local;
        const A m = maxes(n);
        // A no-loss row (negative target) sums nothing: its s is never read, and no rank holds its target.
        const bool has_loss = targets(n) >= 0;
        A sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, has_loss ? cols.valid : 0),
            [&](int v, A& acc) { acc += fast_exp(A(logits(row + v)) - m); }, sum);
        const int t = has_loss ? targets(n) - cols.first : -1;
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          partials(n) = sum;
          partials(N + n) = (t >= 0 && t < cols.valid) ? A(logits(row + t)) : A(0);
        });
      });
}

// The same taking writable logits, which is what callers hold (Real is deduced from the logits).
template <class Real>
void vocab_parallel_row_max(const ExecSpace& space, Vec<accum_t<Real>> maxes, Vec<Real> logits, int N,
                            VocabColumns cols) {
  vocab_parallel_row_max<Real>(space, maxes, CVec<Real>(logits), N, cols);
}
template <class Real>
void vocab_parallel_row_partials(const ExecSpace& space, Vec<accum_t<Real>> partials, Vec<Real> logits,
                                 CVec<accum_t<Real>> maxes, CVec<std::int32_t> targets, int N, VocabColumns cols) {
  vocab_parallel_row_partials<Real>(space, partials, CVec<Real>(logits), maxes, targets, N, cols);
}

// dlogits may be the same memory as logits.
template <class Real>
void vocab_parallel_finish(const ExecSpace& space, Vec<accum_t<Real>> losses, Vec<Real> dlogits,
                           CVec<std::type_identity_t<Real>> logits, CVec<accum_t<Real>> maxes,
                           CVec<accum_t<Real>> partials, CVec<std::int32_t> targets, int N, VocabColumns cols,
                           accum_t<Real> grad_scale) {
  static_assert(reachable_v<Vec<Real>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::vocab_parallel_cross_entropy::finish", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * cols.local;
        if (targets(n) < 0) {  // no loss (kNoLossTarget): the whole team leaves here
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols.local), [&](int v) { dlogits(row + v) = Real(0); });
          Kokkos::single(Kokkos::PerTeam(team), [&]() { losses(n) = A(0); });
          return;
        }
        const A m = maxes(n), inv = A(1) / partials(n);
        // The target's column if this rank holds it (as row_partials decides), else none: a padding column
        // stays 0 whatever the target.
        const int held = targets(n) - cols.first;
        const int t = held >= 0 && held < cols.valid ? held : -1;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols.local), [&](int v) {
          const A p = v < cols.valid ? fast_exp(A(logits(row + v)) - m) * inv : A(0);
          dlogits(row + v) = Real((v == t ? p - A(1) : p) * grad_scale);
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { losses(n) = kmath::log(partials(n)) + m - partials(N + n); });
      });
}

}  // namespace meshtrain
