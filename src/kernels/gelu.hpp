// GELU with the tanh approximation (GPT-2's "gelu_new", torch's approximate="tanh"), elementwise.
//
// Sizes: n elements (N*4C in the MLP).
//   forward:  y = ½ x (1 + tanh(u)),  u = sqrt(2/π) (x + 0.044715 x³)
//   backward: dx = dy · (½ (1 + tanh u) + ½ x (1 − tanh² u) · u'),  u' = sqrt(2/π) (1 + 3·0.044715
//   x²)
//
// Computed through the identity ½ (1 + tanh u) = σ(2u) = 1 / (1 + exp(−2u)):
//   y = x · σ(2u),  dx = dy · (σ + 2 x σ (1 − σ) u')
// One exp instead of tanh (5× cheaper on the host: glibc's tanhf costs ~20 ns), and no cancellation
// in 1 + tanh u for negative x. exp(−2u) = ∞ for very negative x gives σ = 0, y = −0, dx = 0.
#pragma once

#include "core/exec.hpp"
#include "kernels/column_sum.hpp"
#include "kernels/fast_math.hpp"

#include <type_traits>

namespace meshtrain {

inline constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2/π)
inline constexpr double kGeluCubic = 0.044715;

namespace detail {

// The forward value and the derivative at x, in A: every GELU kernel computes them here, so fused
// and separate kernels give the same bits.
template <class A>
KOKKOS_INLINE_FUNCTION A gelu_value(A x) {
  const A u = A(kGeluScale) * (x + A(kGeluCubic) * x * x * x);
  return x / (A(1) + fast_exp(A(-2) * u));
}

template <class A>
KOKKOS_INLINE_FUNCTION A gelu_derivative(A x) {
  const A x2 = x * x;
  const A u = A(kGeluScale) * (x + A(kGeluCubic) * x2 * x);
  const A du = A(kGeluScale) * (A(1) + A(3 * kGeluCubic) * x2);
  const A sig = A(1) / (A(1) + fast_exp(A(-2) * u));
  return sig + A(2) * x * sig * (A(1) - sig) * du;
}

}  // namespace detail

template <class Real>
void gelu_forward(const ExecSpace& space, Vec<Real> out, CVec<std::type_identity_t<Real>> inp, long n) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;  // computed in float for 16-bit Real: one rounding, at the store
  Kokkos::parallel_for(
      "meshtrain::gelu::forward", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(long i) { out(i) = Real(detail::gelu_value(A(inp(i)))); });
}

// The bias of the linear layer before the GELU and the GELU, in one kernel over N rows of OC:
//   pre[n,o] += bias[o]   (rounded to Real and stored: backward reads it)
//   out = gelu(pre)
// bitwise add_bias (kernels/bias.hpp) then gelu_forward. out may not be the memory of pre.
template <class Real>
void bias_gelu_forward(const ExecSpace& space, Vec<Real> pre, Vec<Real> out, CVec<std::type_identity_t<Real>> bias,
                       int N, int OC) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  Kokkos::parallel_for(
      "meshtrain::gelu::bias_forward", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(N) * OC),
      KOKKOS_LAMBDA(long i) {
        const Real x = Real(A(pre(i)) + A(bias(i % OC)));
        pre(i) = x;
        out(i) = Real(detail::gelu_value(A(x)));
      });
}

// dinp is written (=), not accumulated. dinp may be the same memory as dout (in place).
template <class Real>
void gelu_backward(const ExecSpace& space, Vec<Real> dinp, CVec<std::type_identity_t<Real>> inp,
                   CVec<std::type_identity_t<Real>> dout, long n) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;  // computed in float for 16-bit Real: one rounding, at the store
  Kokkos::parallel_for(
      "meshtrain::gelu::backward", Kokkos::RangePolicy<ExecSpace>(space, 0, n), KOKKOS_LAMBDA(long i) {
        // dout(i) is read before dinp(i) is written: in place is safe
        dinp(i) = Real(detail::gelu_derivative(A(inp(i))) * A(dout(i)));
      });
}

// The GELU's backward and the bias gradient of the linear layer before it, over N rows of OC:
//   dinp = gelu'(inp) · dout   (written; may be the memory of dout)
//   dbias[o] += Σ_n dinp[n,o]  (of the stored, rounded dinp: bitwise gelu_backward then
//                               bias_backward, kernels/column_sum.hpp's order)
// partials holds column_sum_workspace(N, OC) elements.
template <class Real>
void gelu_backward_bias(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dbias,
                        Vec<accum_t<std::type_identity_t<Real>>> partials, CVec<std::type_identity_t<Real>> inp,
                        CVec<std::type_identity_t<Real>> dout, int N, int OC) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  column_sums<1, Real>(
      space, "meshtrain::gelu::backward_bias", {dbias}, partials, N, OC, KOKKOS_LAMBDA(long n, int o) {
        const long i = n * OC + o;
        const Real d = Real(detail::gelu_derivative(A(inp(i))) * A(dout(i)));
        dinp(i) = d;
        return Kokkos::Array<A, 1>{A(d)};
      });
}

}  // namespace meshtrain
