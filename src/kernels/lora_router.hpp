// LoRA's up product beside the MoE router (kernels/router_linear.hpp), whose logits are in the accumulation
// type: logits (N, E) += s · h Bᵀ for h = drop(x) Aᵀ (N, r, kernels/lora.hpp's down product) and B (E, r),
// and its backward. fp32 and fp64 go through kernels/lora.hpp's GEMMs; the 16-bit types through kernels
// that sum each element's r or E products in float and round once, as the router's own do (E and r are
// small).
#pragma once

#include "kernels/lora.hpp"

#include <type_traits>

namespace meshtrain {

// logits (N·E, accum_t<Real>) += s · h · Bᵀ.
template <class Real>
void lora_router_up_forward(const ExecSpace& space, Vec<accum_t<Real>> logits, CVec<std::type_identity_t<Real>> h,
                            CVec<std::type_identity_t<Real>> B, double s, int N, int E, int r) {
  using A = accum_t<Real>;
  if constexpr (std::is_same_v<Real, A>) {
    lora_up_forward<Real>(space, logits.data(), E, h, B, s, N, E, r);
  } else {
    const A scale = A(s);
    Kokkos::parallel_for(
        "meshtrain::lora::router_up", Kokkos::RangePolicy<ExecSpace>(space, 0, long(N) * E), KOKKOS_LAMBDA(long i) {
          const long n = i / E, e = i % E;
          A sum = 0;
          for (int k = 0; k < r; ++k) sum += A(h(n * r + k)) * A(B(e * r + k));
          logits(i) += scale * sum;
        });
  }
}

// dB (E, r) += s · dlogitsᵀ · h and dh (N, r) = s · dlogits · B (overwritten).
template <class Real>
void lora_router_up_backward(const ExecSpace& space, Vec<Real> dh, Vec<Real> dB,
                             CVec<accum_t<std::type_identity_t<Real>>> dlogits, CVec<std::type_identity_t<Real>> h,
                             CVec<std::type_identity_t<Real>> B, double s, int N, int E, int r) {
  using A = accum_t<Real>;
  if constexpr (std::is_same_v<Real, A>) {
    lora_up_backward<Real>(space, dh, dB, dlogits.data(), E, h, B, s, N, E, r);
  } else {
    const A scale = A(s);
    Kokkos::parallel_for(
        "meshtrain::lora::router_up_weight", Kokkos::RangePolicy<ExecSpace>(space, 0, long(E) * r),
        KOKKOS_LAMBDA(long i) {
          const long e = i / r, k = i % r;
          A sum = 0;
          for (int n = 0; n < N; ++n) sum += dlogits(n * E + e) * A(h(n * r + k));
          dB(i) = Real(A(dB(i)) + scale * sum);
        });
    Kokkos::parallel_for(
        "meshtrain::lora::router_up_input", Kokkos::RangePolicy<ExecSpace>(space, 0, long(N) * r),
        KOKKOS_LAMBDA(long i) {
          const long n = i / r, k = i % r;
          A sum = 0;
          for (int e = 0; e < E; ++e) sum += dlogits(n * E + e) * A(B(e * r + k));
          dh(i) = Real(scale * sum);
        });
  }
}

}  // namespace meshtrain
