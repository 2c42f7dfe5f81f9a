// The mixture-of-experts router after its logits GEMM: softmax, top-k and gates, the load-balancing
// and z losses, and the gradient of all three back to the logits (share/docs/usage.md, Mixture of
// experts).
//
// Sizes: N tokens, E experts, k experts per token. A = accum_t<Real>: the router runs in float for
// 16-bit models (fp32, fp64 for fp64 runs, as usage.md says) and stores probs, gate, lse in it.
//   forward:  p[n,:] = softmax(z[n,:]) (max-subtracted),  lse[n] = log Σ_e exp z[n,e]
//             expert[n,:] = the k largest p[n,e] in descending order, equal ones by lower e first
//             gate[n,j] = p[n,e_j] / S_n, S_n = Σ_{i<k} p[n,e_i] (normalize), else p[n,e_j]
//   losses:   aux = E · Σ_e f_e · P_e,  f_e = routed[e] / (N·k),  P_e = (1/N) Σ_n p[n,e]   (N: tokens below)
//             z = (1/N) Σ_n lse[n]²
//   backward: dp[n,e] = aux_weight · E · f_e / N                       (∂aux/∂p; f carries no gradient)
//                     + (e = e_j: (dgate_j − Σ_i dgate_i g_i) / S       normalize
//                                  dgate_j                              otherwise)
//             dz[n,e] = p (dp − Σ_e' p dp) + z_weight · (2/N) · lse[n] · p     (softmax; ∂lse/∂z = p)
//
// Context parallelism splits a micro-batch's tokens over its group (parallel.cp): each rank routes its own
// N rows, while f and P, the losses' means and their gradients are the micro-batch's. So the losses take
// `routed`, the micro-batch's routed counts (the group's sum), and `tokens`, its token count (N · cp): each
// rank's terms over its rows then sum over the group to the micro-batch's losses (routed = the rank's own
// counts and tokens = N without the split).
//
// One team per token for the row kernels. Top-k is k rounds of two exact team reductions (the
// largest p left, then the lowest expert holding it), so ties resolve the same on every backend.
#pragma once

#include "core/exec.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/fast_math.hpp"

#include <type_traits>
#include <utility>

namespace meshtrain {

// probs [N*E], lse [N], expert [N*k], gate [N*k] are written.
template <class Real>
void router_forward(const ExecSpace& space, Vec<accum_t<Real>> probs, Vec<int> expert, Vec<accum_t<Real>> gate,
                    Vec<accum_t<Real>> lse, CVec<Real> logits, int N, int E, int k, bool normalize) {
  static_assert(reachable_v<CVec<Real>> && reachable_v<Vec<int>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "meshtrain::moe_router::forward", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * E;
        const long chosen = static_cast<long>(n) * k;
        A row_max;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, E),
            [&](int e, A& m) {
              if (A(logits(row + e)) > m) m = logits(row + e);
            },
            Kokkos::Max<A>(row_max));
        A sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, E), [&](int e, A& acc) { acc += fast_exp(A(logits(row + e)) - row_max); },
            sum);
        const A inv = A(1) / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, E),
                             [&](int e) { probs(row + e) = fast_exp(A(logits(row + e)) - row_max) * inv; });
        team.team_barrier();  // the top-k rounds read every thread's probabilities
        // Round j takes the largest (p, −e) below round j−1's in lexicographic order: the largest p
        // left, and of the experts holding it the lowest index.
        A last_p = 0;
        int last_e = -1;
        A chosen_sum = 0;
        for (int j = 0; j < k; ++j) {
          const auto below_last = [&](int e) {
            const A p = probs(row + e);
            return last_e < 0 || p < last_p || (p == last_p && e > last_e);
          };
          A best_p;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, E),
              [&](int e, A& m) {
                if (below_last(e) && probs(row + e) > m) m = probs(row + e);
              },
              Kokkos::Max<A>(best_p));
          int best_e;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, E),
              [&](int e, int& m) {
                if (below_last(e) && probs(row + e) == best_p && e < m) m = e;
              },
              Kokkos::Min<int>(best_e));
          Kokkos::single(Kokkos::PerTeam(team), [&]() { expert(chosen + j) = best_e; });
          last_p = best_p;
          last_e = best_e;
          chosen_sum += best_p;
        }
        // Every thread holds the same chosen_sum (each added the reductions' results in order j).
        team.team_barrier();
        const A divisor = normalize ? chosen_sum : A(1);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k),
                             [&](int j) { gate(chosen + j) = probs(row + expert(chosen + j)) / divisor; });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { lse(n) = row_max + kmath::log(sum); });
      });
}

// The two auxiliary losses of one MoE block (plain values; the caller weights them).
struct RouterLosses {
  double aux, z;
};

// One MoE block's statistics in the device sums, per block (router_sums_per_block(E) doubles):
// Σ aux, Σ z, then each expert's Σ routed (E) and Σ kept (E) rows, summed over the forward passes.
constexpr std::size_t router_sums_per_block(int E) { return 2 + 2 * std::size_t(E); }

// Adds one MoE block's two losses and its routing counts into its sums at b · router_sums_per_block(E)
// on the device: one launch and no read, so a training step reads every block's sums once, for the
// metrics. counts [2E+1]: moe_assign's routed (E, assignments per expert before capacity) | offsets
// (E+1, whose differences are the kept rows), this rank's; the losses' `routed` and `tokens` the
// micro-batch's (above). Summed in double: team 0 the aux loss, each expert's
// column of p in row chunks of kReduceChunk (each chunk in row order), the chunk terms combined by the
// team's reduction, and then the counts; team 1 Σ lse² the same way (as squared_norm's chunks). The
// combination order is fixed for a backend and team size.
template <class A>
void add_router_statistics(const ExecSpace& space, CVec<A> probs, CVec<A> lse, CVec<int> counts, CVec<int> routed,
                           int N, long tokens, int E, int k, Vec<double> sums, int b) {
  static_assert(reachable_v<CVec<A>> && reachable_v<CVec<int>> && reachable_v<Vec<double>>);
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const long chunks = (static_cast<long>(N) + kReduceChunk - 1) / kReduceChunk;
  const double T = double(tokens);
  const long at = static_cast<long>(b) * static_cast<long>(router_sums_per_block(E));
  Kokkos::parallel_for(
      "meshtrain::moe_router::losses", team_policy(space, 2), KOKKOS_LAMBDA(const Team& team) {
        double total = 0;
        if (team.league_rank() == 0) {  // Σ_e routed[e] · Σ_n p[n,e]
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, chunks * E),
              [&](long i, double& acc) {
                const int e = static_cast<int>(i % E);  // neighbouring threads read neighbouring columns
                const long begin = (i / E) * kReduceChunk;
                const long end = begin + kReduceChunk < N ? begin + kReduceChunk : N;
                double column = 0;
                for (long n = begin; n < end; ++n) column += static_cast<double>(probs(n * E + e));
                acc += static_cast<double>(routed(e)) * column;
              },
              total);
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            sums(at) += E * total / (T * k * T);
            for (int e = 0; e < E; ++e) {
              sums(at + 2 + e) += counts(e);
              sums(at + 2 + E + e) += counts(E + 1 + e) - counts(E + e);
            }
          });
        } else {  // Σ_n lse[n]²
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, chunks),
              [&](long c, double& acc) {
                const long end = (c + 1) * kReduceChunk < N ? (c + 1) * kReduceChunk : N;
                double s = 0;
                for (long n = c * kReduceChunk; n < end; ++n) {
                  const double x = static_cast<double>(lse(n));
                  s += x * x;
                }
                acc += s;
              },
              total);
          Kokkos::single(Kokkos::PerTeam(team), [&]() { sums(at + 1) += total / T; });
        }
      });
}

// The two losses of add_router_statistics read back to the host (tests; fences); counts as there, the
// micro-batch's `routed` and `tokens` this rank's own unless given.
template <class A>
RouterLosses router_losses(const ExecSpace& space, CVec<A> probs, CVec<A> lse, CVec<int> counts, int N, int E, int k,
                           CVec<int> routed = {}, long tokens = 0) {
  const Buffer<double> sums("meshtrain::moe_router::sums", router_sums_per_block(E));
  if (tokens == 0) {
    routed = Kokkos::subview(counts, std::pair<long, long>(0, E));
    tokens = N;
  }
  add_router_statistics<A>(space, probs, lse, counts, routed, N, tokens, E, k, sums, 0);
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, sums);
  return {host(0), host(1)};
}

namespace detail {

// ∂/∂p[n,e] of the weighted aux loss plus the gates' term, for one token: `chosen` points at its
// k experts and gate gradients, `gate_term` = Σ_i dgate_i g_i (normalize) and `inv_sum` = 1/S, or
// 0 and 1 without normalisation.
template <class A>
struct RouterProbGradient {
  CVec<int> expert;
  CVec<A> dgate;
  CVec<int> routed;
  long chosen;
  int k;
  A aux_scale, gate_term, inv_sum;

  KOKKOS_INLINE_FUNCTION A operator()(int e) const {
    A dp = aux_scale * A(routed(e));
    for (int j = 0; j < k; ++j) {
      if (expert(chosen + j) == e) dp += (dgate(chosen + j) - gate_term) * inv_sum;
    }
    return dp;
  }
};

}  // namespace detail

// dlogits [N*E] is written (=). dgate [N*k] is the gates' gradient; probs, expert, lse the forward's;
// routed and tokens the micro-batch's (above); aux_weight and z_weight multiply aux and z in the objective.
template <class Real>
void router_backward(const ExecSpace& space, Vec<Real> dlogits, CVec<accum_t<std::type_identity_t<Real>>> dgate,
                     CVec<accum_t<std::type_identity_t<Real>>> probs, CVec<int> expert,
                     CVec<accum_t<std::type_identity_t<Real>>> lse, CVec<int> routed, accum_t<Real> aux_weight,
                     accum_t<Real> z_weight, int N, long tokens, int E, int k, bool normalize) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<int>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const A aux_scale = aux_weight * A(E) / (A(tokens) * A(k) * A(tokens));
  const A z_scale = z_weight * A(2) / A(tokens);
  Kokkos::parallel_for(
      "meshtrain::moe_router::backward", team_policy(space, N), KOKKOS_LAMBDA(const Team& team) {
        const int n = team.league_rank();
        const long row = static_cast<long>(n) * E;
        const long chosen = static_cast<long>(n) * k;
        // S and Σ_i dgate_i g_i in choice order, the same on every thread (k is small).
        A sum = 0;
        for (int j = 0; j < k; ++j) sum += probs(row + expert(chosen + j));
        A gate_term = 0;
        for (int j = 0; j < k; ++j) gate_term += dgate(chosen + j) * probs(row + expert(chosen + j)) / sum;
        const detail::RouterProbGradient<A> dp{
            expert, dgate, routed, chosen, k, aux_scale, normalize ? gate_term : A(0), normalize ? A(1) / sum : A(1)};
        A p_dot_dp = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, E), [&](int e, A& acc) { acc += probs(row + e) * dp(e); }, p_dot_dp);
        const A lse_term = z_scale * lse(n);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, E), [&](int e) {
          const A p = probs(row + e);
          dlogits(row + e) = Real(p * (dp(e) - p_dot_dp) + lse_term * p);
        });
      });
}

}  // namespace meshtrain
