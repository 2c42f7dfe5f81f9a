// Rotary position embedding (RoPE) with Hugging Face Llama's half-split ("rotate_half") convention.
//
// Sizes: N rows (= B*T), T time, hs head size (even), half = hs/2; a row holds `heads` heads of hs
// columns each at columns h*hs .. h*hs+hs-1, rows row_stride elements apart (in the fused qkv row
// [q: NH*hs | k: KV*hs | v: KV*hs], heads = NH + KV rotates q and k and leaves v alone).
//   angle(t, i) = t · f_i,  f_i = theta^(−2i/hs) (rescaled under model.rope_scaling),  i < half,  t the row's position
//   in its document: its position in the sequence (n % T, or under context parallelism the global position of local
//   row n % T, ContextChunks), less the start of its document where segments are given (packed sequences: every
//   document starts at 0, as when it is trained alone)
//   forward:  x'[i]      = x[i] · cos − x[i+half] · sin
//             x'[i+half] = x[i+half] · cos + x[i] · sin
//   backward: the transpose, a rotation by −angle:
//             dx[i]      = dx'[i] · cos + dx'[i+half] · sin
//             dx[i+half] = dx'[i+half] · cos − dx'[i] · sin
// Both run in place, in accum_t<Real>, and round each element once.
//
// cos and sin are tabulated once on the host in double (angle products up to T·1 lose nothing to a
// float angle) and stored in accum_t<Real> in device memory.
#pragma once

#include "core/exec.hpp"
#include "kernels/attention_segments.hpp"

#include <cmath>
#include <type_traits>
#include <vector>

namespace meshtrain {

// cos and sin of angle(t, i), each [T * hs/2], row t.
template <class A>
struct RotaryTable {
  Buffer<A> cos, sin;
};

// The unscaled frequencies θ^(−2i/hs), i < hs/2 (model/rotary_frequencies.hpp rescales them for
// model.rope_scaling).
inline std::vector<double> rotary_frequencies(int hs, double theta) {
  std::vector<double> frequencies(static_cast<std::size_t>(hs / 2));
  for (int i = 0; i < hs / 2; ++i) frequencies[static_cast<std::size_t>(i)] = std::pow(theta, -2.0 * i / hs);
  return frequencies;
}

// The table of angle(t, i) = t · frequencies[i] for t < T; hs = 2 · frequencies.size().
template <class A>
RotaryTable<A> make_rotary_table(int T, const std::vector<double>& frequencies) {
  const int half = static_cast<int>(frequencies.size());
  const std::size_t count = static_cast<std::size_t>(T) * half;
  RotaryTable<A> table{Buffer<A>("meshtrain::rotary::cos", count), Buffer<A>("meshtrain::rotary::sin", count)};
  auto cosines = Kokkos::create_mirror_view(table.cos);
  auto sines = Kokkos::create_mirror_view(table.sin);
  for (int i = 0; i < half; ++i) {
    for (int t = 0; t < T; ++t) {
      const double angle = t * frequencies[static_cast<std::size_t>(i)];
      cosines(static_cast<std::size_t>(t) * half + i) = A(std::cos(angle));
      sines(static_cast<std::size_t>(t) * half + i) = A(std::sin(angle));
    }
  }
  Kokkos::deep_copy(table.cos, cosines);
  Kokkos::deep_copy(table.sin, sines);
  return table;
}

template <class A>
RotaryTable<A> make_rotary_table(int T, int hs, double theta) {
  return make_rotary_table<A>(T, rotary_frequencies(hs, theta));
}

namespace detail {

// Rotates every (i, i+half) pair of every head by `direction` · angle (+1 forward, −1 backward).
template <class Real>
void rotate_heads(const ExecSpace& space, const char* label, Vec<Real> x, const RotaryTable<accum_t<Real>>& table,
                  int N, int T, int row_stride, int heads, int hs, int direction, const AttentionSegments& segments,
                  const ContextChunks& chunks) {
  static_assert(reachable_v<Vec<Real>>);
  using A = accum_t<Real>;
  const int half = hs / 2;
  const CVec<A> cosines(table.cos.data(), table.cos.extent(0));  // the views, not the struct, go to the device
  const CVec<A> sines(table.sin.data(), table.sin.extent(0));
  const A sign = A(direction);
  const DocumentBounds docs{segments.offsets.data(), segments.docs, T};
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(N) * heads * half), KOKKOS_LAMBDA(long p) {
        const int i = p % half;
        const long head = p / half;  // n * heads + h
        const long n = head / heads;
        const long lo = n * row_stride + (head % heads) * hs + i;
        const int t = chunks.position(int(n % T));
        const long angle = long(t - docs.start(int(n / T), t)) * half + i;
        const A c = cosines(angle);
        const A s = sign * sines(angle);
        const A x0 = x(lo);
        const A x1 = x(lo + half);
        x(lo) = Real(x0 * c - x1 * s);
        x(lo + half) = Real(x1 * c + x0 * s);
      });
}

}  // namespace detail

// x [N*row_stride] is rotated in place; columns outside the `heads` heads are untouched. segments: the
// documents of each of the N/T sequences (none: one per sequence), in global positions. chunks: where the T
// local rows of a sequence sit in it under context parallelism (default: they are the sequence); the table
// then covers the whole sequence's positions.
template <class Real>
void rotary_forward(const ExecSpace& space, Vec<Real> x, const RotaryTable<accum_t<Real>>& table, int N, int T,
                    int row_stride, int heads, int hs, const AttentionSegments& segments = {},
                    const ContextChunks& chunks = {}) {
  detail::rotate_heads<Real>(space, "meshtrain::rotary::forward", x, table, N, T, row_stride, heads, hs, 1, segments,
                             chunks);
}

// dx [N*row_stride] is rotated back in place (the transpose of the forward).
template <class Real>
void rotary_backward(const ExecSpace& space, Vec<Real> dx, const RotaryTable<accum_t<Real>>& table, int N, int T,
                     int row_stride, int heads, int hs, const AttentionSegments& segments = {},
                     const ContextChunks& chunks = {}) {
  detail::rotate_heads<Real>(space, "meshtrain::rotary::backward", dx, table, N, T, row_stride, heads, hs, -1, segments,
                             chunks);
}

}  // namespace meshtrain
