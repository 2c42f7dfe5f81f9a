// Token and position embedding: the first layer of GPT-2.
//
// Sizes: B batch, T time, N = B*T rows, C channels, V vocabulary.
//   forward:  out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
//   backward: dwte[v,:] += Σ_{(b,t): tokens[b,t]=v} dout[b,t,:],  dwpe[t,:] += Σ_b dout[b,t,:]
//
// The backward scatters many rows into one (a token may repeat), so it is written without atomics:
// teams own blocks of channels and walk the rows in order, which makes every sum run in the same
// order on every backend and every run.
//
// 16-bit Real: values are added in float; dwpe is summed in float and rounded once, but dwte is
// rounded after every occurrence of a token (its destination row changes from row to row), so a
// token seen k times carries up to k roundings of its gradient row.
#pragma once

#include "core/exec.hpp"

#include <cstdint>
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

// Channels per team in the backward sweeps: every row contributes one contiguous run of this many.
inline constexpr int kEncoderColumnBlock = 64;

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

// dwte and dwpe accumulate (+=); dout is [N*C]. An empty dwpe: a model without a position table.
template <class Real>
void encoder_backward(const ExecSpace& space, Vec<Real> dwte, Vec<Real> dwpe, CVec<std::type_identity_t<Real>> dout,
                      CVec<std::int32_t> tokens, int B, int T, int C, int V, VocabRange range = {}) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>> && reachable_v<CVec<std::int32_t>>);
  using A = accum_t<Real>;
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int N = B * T;
  const int blocks = (C + kEncoderColumnBlock - 1) / kEncoderColumnBlock;
  // A channel c always falls to the same thread of its team, so each dwte[v,c] is summed by one
  // thread in row order: no race, and the same order every run.
  Kokkos::parallel_for(
      "meshtrain::encoder::backward_wte", team_policy(space, blocks), KOKKOS_LAMBDA(const Team& team) {
        const int c0 = team.league_rank() * kEncoderColumnBlock;
        const int c1 = c0 + kEncoderColumnBlock < C ? c0 + kEncoderColumnBlock : C;
        for (int n = 0; n < N; ++n) {
          const int row = tokens(n) - range.first;
          if (row < 0 || row >= range.rows) continue;  // another rank's vocabulary rows
          const long o = static_cast<long>(n) * C;
          const long e = static_cast<long>(row) * C;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c0, c1),
                               [&](int c) { dwte(e + c) = Real(A(dwte(e + c)) + A(dout(o + c))); });
        }
      });
  if (dwpe.extent(0) == 0) return;  // no position table (llama)
  // dwpe[t,c]: one team per position, summing the batch in order into one accumulator per channel
  // (rounded to Real once, not once per sequence).
  Kokkos::parallel_for(
      "meshtrain::encoder::backward_wpe", team_policy(space, T), KOKKOS_LAMBDA(const Team& team) {
        const int t = team.league_rank();
        const long p = static_cast<long>(t) * C;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          A acc = dwpe(p + c);
          for (int b = 0; b < B; ++b) acc += A(dout((static_cast<long>(b) * T + t) * C + c));
          dwpe(p + c) = Real(acc);
        });
      });
}

}  // namespace meshtrain
