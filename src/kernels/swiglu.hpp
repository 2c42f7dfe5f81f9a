// SwiGLU, the gated activation of LLaMA's MLP (down_proj(silu(gate_proj(x)) · up_proj(x))), elementwise.
//
// Sizes: N rows (= B*T), H hidden width. gate_up [N, 2H]: row n is [gate (H) | up (H)], the two
// projections computed by one GEMM; out [N, H].
//   forward:  out = silu(g) · u,  silu(g) = g · σ(g) = g / (1 + exp(−g)),  σ(g) = 1 / (1 + exp(−g))
//   backward: dg = dout · u · σ(g) · (1 + g · (1 − σ(g))),  du = dout · silu(g)
//             (silu'(g) = σ + g σ (1 − σ))
// Computed in accum_t<Real>, rounded once at the store. exp(−g) = ∞ for very negative g gives
// σ = 0: out = −0, dg = du = 0, no NaN.
#pragma once

#include "core/exec.hpp"
#include "kernels/fast_math.hpp"

#include <type_traits>

namespace meshtrain {

namespace detail {

// What both passes read for out[i] (row n = i / H, column j = i % H): the gate element's index in
// gate_up (up is H after it), g, u and σ(g).
template <class A>
struct SwiGluInputs {
  long gate;
  A g, u, sig;
};

template <class A, class View>
KOKKOS_INLINE_FUNCTION SwiGluInputs<A> swiglu_inputs(const View& gate_up, long i, int H) {
  const long gate = (i / H) * 2 * H + i % H;
  const A g = gate_up(gate);
  return {gate, g, A(gate_up(gate + H)), A(1) / (A(1) + fast_exp(-g))};
}

}  // namespace detail

// out [N*H] is written.
template <class Real>
void swiglu_forward(const ExecSpace& space, Vec<Real> out, CVec<std::type_identity_t<Real>> gate_up, int N, int H) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  Kokkos::parallel_for(
      "meshtrain::swiglu::forward", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(N) * H),
      KOKKOS_LAMBDA(long i) {
        const auto in = detail::swiglu_inputs<A>(gate_up, i, H);
        out(i) = Real(in.g * in.sig * in.u);
      });
}

// dgate_up [N*2H] is written (=), both halves. It may not alias gate_up or dout.
template <class Real>
void swiglu_backward(const ExecSpace& space, Vec<Real> dgate_up, CVec<std::type_identity_t<Real>> dout,
                     CVec<std::type_identity_t<Real>> gate_up, int N, int H) {
  static_assert(reachable_v<Vec<Real>> && reachable_v<CVec<Real>>);
  using A = accum_t<Real>;
  Kokkos::parallel_for(
      "meshtrain::swiglu::backward", Kokkos::RangePolicy<ExecSpace>(space, 0, static_cast<long>(N) * H),
      KOKKOS_LAMBDA(long i) {
        const auto in = detail::swiglu_inputs<A>(gate_up, i, H);
        const A d = dout(i);
        dgate_up(in.gate) = Real(d * in.u * in.sig * (A(1) + in.g * (A(1) - in.sig)));
        dgate_up(in.gate + H) = Real(d * in.g * in.sig);
      });
}

}  // namespace meshtrain
