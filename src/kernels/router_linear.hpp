// The MoE router's product (share/docs/usage.md, Mixture of experts) in the accumulation type:
// logits (N, E) = x (N, C) · Wᵀ, W [E, C] torch Linear layout, and its backward. The routing
// decisions (top-k, capacity) are made on fp32 logits whatever the compute precision: logits
// rounded to 16 bits would tie often, and a rounding that differs between two layouts' sums would
// send a token to another expert.
//
// fp32 and fp64 go through the GEMM dispatch; the 16-bit types through kernels that sum each
// element's products in float in a fixed order and round once (E is small: the router's
// N·E·C multiply-adds are a sliver of the experts' N·k·3·H·C).
#pragma once

#include "core/exec.hpp"
#include "kernels/gemm.hpp"

#include <type_traits>

namespace meshtrain {

// logits (N·E) in accum_t<Real> is written.
template <class Real>
void router_logits_forward(const ExecSpace& space, Vec<accum_t<Real>> logits, CVec<std::type_identity_t<Real>> x,
                           CVec<std::type_identity_t<Real>> w, int N, int C, int E) {
  using A = accum_t<Real>;
  if constexpr (std::is_same_v<Real, A>) {
    gemm<Real>(space, Trans::no, Trans::yes, {N, E, C}, A(1), x.data(), C, w.data(), C, A(0), logits.data(), E);
  } else {
    Kokkos::parallel_for(
        "meshtrain::router::logits", Kokkos::RangePolicy<ExecSpace>(space, 0, long(N) * E), KOKKOS_LAMBDA(long i) {
          const long n = i / E, e = i % E;
          A sum = 0;
          for (int c = 0; c < C; ++c) sum += A(x(n * C + c)) * A(w(e * C + c));
          logits(i) = sum;
        });
  }
}

// dw (E·C) += dlogitsᵀ · x (not where dw is empty: a frozen router, LoRA's base) and dx (N·C) +=
// dlogits · W, each element's sum in accum_t<Real> rounded once.
template <class Real>
void router_logits_backward(const ExecSpace& space, Vec<Real> dx, Vec<Real> dw,
                            CVec<accum_t<std::type_identity_t<Real>>> dlogits, CVec<std::type_identity_t<Real>> x,
                            CVec<std::type_identity_t<Real>> w, int N, int C, int E) {
  using A = accum_t<Real>;
  if constexpr (std::is_same_v<Real, A>) {
    if (dw.extent(0) > 0) {
      gemm<Real>(space, Trans::yes, Trans::no, {E, C, N}, A(1), dlogits.data(), E, x.data(), C, A(1), dw.data(), C);
    }
    gemm<Real>(space, Trans::no, Trans::no, {N, C, E}, A(1), dlogits.data(), E, w.data(), C, A(1), dx.data(), C);
  } else {
    if (dw.extent(0) > 0) {
      Kokkos::parallel_for(
          "meshtrain::router::weight_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, long(E) * C),
          KOKKOS_LAMBDA(long i) {
            const long e = i / C, c = i % C;
            A sum = dw(i);
            for (int n = 0; n < N; ++n) sum += dlogits(n * E + e) * A(x(n * C + c));
            dw(i) = Real(sum);
          });
    }
    Kokkos::parallel_for(
        "meshtrain::router::input_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, long(N) * C),
        KOKKOS_LAMBDA(long i) {
          const long n = i / C, c = i % C;
          A sum = dx(i);
          for (int e = 0; e < E; ++e) sum += dlogits(n * E + e) * A(w(e * C + c));
          dx(i) = Real(sum);
        });
  }
}

}  // namespace meshtrain
