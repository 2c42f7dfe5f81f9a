// Softmax cross-entropy on the logits, fused with its gradient, and the deterministic sums that
// turn per-row losses into a mean and gradients into a norm.
//
// Sizes: N rows (= B*T), V vocabulary; each row of logits and dlogits `stride` ≥ V wide (the vocabulary
// padded for the GEMMs, share/docs/design.md): the columns past V are no token's, their dlogits 0.
//   p[n,:] = softmax(logits[n,:]) (shifted by the row maximum)
//   losses[n] = −log p[n, targets[n]] = log Σ_v exp(logits[n,v] − max) − (logits[n,target] − max)
//   dlogits[n,v] = (p[n,v] − [v = targets[n]]) · grad_scale
// A row whose target is kNoLossTarget (any negative target) carries no loss:
//   losses[n] = 0,  dlogits[n,:] = 0 (padding columns included)
#pragma once

#include "core/exec.hpp"
#include "kernels/fast_math.hpp"

#include <cstdint>
#include <type_traits>

namespace meshtrain {

// The target of a position that carries no loss: prompt tokens of a fine-tuning record, padding of a
// packed sequence. Its row's loss and gradient are 0, so neither the mean loss nor the gradient sees
// it; grad_scale is then 1 / (number of targets that carry a loss). Any negative target is taken the
// same way, and none indexes the logits.
inline constexpr std::int32_t kNoLossTarget = -1;

// Elements per sequential chunk in sum_reduce and squared_norm.
inline constexpr long kReduceChunk = 4096;

// dlogits may be the same memory as logits: each row is read in full before it is overwritten.
// losses and dlogits are written (=). grad_scale is typically 1 / (number of target tokens).
// Computed in accum_t<Real>; the per-row losses are stored in it. In float and double the
// exponentials wait in dlogits between the sum and the normalisation; a 16-bit dlogits would round
// them twice, so there they are recomputed from the logits (read and overwritten by the same
// thread, so in place still holds) and rounded once.
template <class Real>
void softmax_cross_entropy(const ExecSpace& space, Vec<accum_t<Real>> losses, Vec<Real> dlogits,
                           CVec<std::type_identity_t<Real>> logits, CVec<std::int32_t> targets, int N, int V,
                           accum_t<Real> grad_scale, int stride = 0) {
  if (stride < V) stride = V;  // unpadded rows
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>> && reachable_v<CVec<std::int32_t>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  // 16-bit rows recompute the exponentials instead of storing them: dlogits cannot hold them exactly.
  constexpr bool keep_exponentials = !is_low_precision_v<Real>;
  Kokkos::parallel_for(
      "meshtrain::cross_entropy::forward_backward", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * stride;
        const int target = targets(n);
        if (target < 0) {  // kNoLossTarget: the whole team leaves here, before any barrier
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, stride), [&](int v) { dlogits(row + v) = Real(0); });
          Kokkos::single(Kokkos::PerTeam(team), [&]() { losses(n) = A(0); });
          return;
        }
        A row_max;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V),
            [&](int v, A& m) {
              if (A(logits(row + v)) > m) m = logits(row + v);
            },
            Kokkos::Max<A>(row_max));
        // Every thread reads the target logit before any thread overwrites the row.
        const A target_logit = logits(row + target);
        team.team_barrier();
        A sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V),
            [&](int v, A& acc) {
              const A e = fast_exp(A(logits(row + v)) - row_max);
              // A plain if on a constant: nvcc refuses a device lambda whose first use of a
              // captured view sits inside `if constexpr`.
              if (keep_exponentials) dlogits(row + v) = Real(e);
              acc += e;
            },
            sum);
        team.team_barrier();
        const A inv = A(1) / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V), [&](int v) {
          A p;
          if constexpr (is_low_precision_v<Real>) {
            p = fast_exp(A(logits(row + v)) - row_max) * inv;
          } else {
            p = dlogits(row + v) * inv;
          }
          dlogits(row + v) = Real((v == target ? p - A(1) : p) * grad_scale);
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V, stride), [&](int v) { dlogits(row + v) = Real(0); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { losses(n) = kmath::log(sum) - (target_logit - row_max); });
      });
}

namespace detail {

struct Identity {
  KOKKOS_INLINE_FUNCTION double operator()(double x) const { return x; }
};
struct Square {
  KOKKOS_INLINE_FUNCTION double operator()(double x) const { return x * x; }
};

// Σ_i term(x[i]), accumulated in double in a fixed order: fixed chunks summed in index order, and
// the chunk sums combined by Kokkos' reduction, whose order is fixed for a given backend, thread
// count and size (on OpenMP each thread sums a contiguous run of chunks, so another thread count
// may change the last bits).
// `total`: a double on the host, or a View<double> in device memory that the sum stays in (the same
// bits: one reduction, whatever holds its result).
template <class Real, class Term, class Total>
void chunked_sum(const ExecSpace& space, const char* label, CVec<Real> x, long n, Term term, Total&& total) {
  static_assert(reachable_v<CVec<Real>>);
  const long chunks = (n + kReduceChunk - 1) / kReduceChunk;
  Kokkos::parallel_reduce(
      label, Kokkos::RangePolicy<ExecSpace>(space, 0, chunks),
      KOKKOS_LAMBDA(long k, double& acc) {
        const long end = (k + 1) * kReduceChunk < n ? (k + 1) * kReduceChunk : n;
        double s = 0;
        for (long i = k * kReduceChunk; i < end; ++i) s += term(static_cast<double>(accum_t<Real>(x(i))));
        acc += s;
      },
      total);
}
template <class Real, class Term>
double chunked_sum(const ExecSpace& space, const char* label, CVec<Real> x, long n, Term term) {
  double total = 0;
  chunked_sum(space, label, x, n, term, total);
  return total;
}

}  // namespace detail

// Σ_i x[i], in double, in a fixed order (deterministic for a given backend and thread count), returned in
// accum_t<Real> (float for 16-bit x).
template <class Real>
accum_t<Real> sum_reduce(const ExecSpace& space, CVec<Real> x, long n) {
  return static_cast<accum_t<Real>>(detail::chunked_sum(space, "meshtrain::reduce::sum", x, n, detail::Identity{}));
}

// The same Σ_i x[i], left in device memory in double (not rounded to accum_t<Real>): no read to the host.
template <class Real>
void sum_reduce_into(const ExecSpace& space, Kokkos::View<double, MemSpace> total, CVec<Real> x, long n) {
  detail::chunked_sum(space, "meshtrain::reduce::sum", x, n, detail::Identity{}, total);
}

// Σ_i x[i]², in double, in the same fixed order as sum_reduce.
template <class Real>
double squared_norm(const ExecSpace& space, CVec<Real> x, long n) {
  return detail::chunked_sum(space, "meshtrain::reduce::squared_norm", x, n, detail::Square{});
}

// The same for a writable view, so that callers holding a Vec need not name Real.
template <class Real>
accum_t<Real> sum_reduce(const ExecSpace& space, Vec<Real> x, long n) {
  return sum_reduce<Real>(space, CVec<Real>(x), n);
}
template <class Real>
double squared_norm(const ExecSpace& space, Vec<Real> x, long n) {
  return squared_norm<Real>(space, CVec<Real>(x), n);
}

}  // namespace meshtrain
