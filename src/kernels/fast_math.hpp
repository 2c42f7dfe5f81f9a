// exp for the row kernels (softmax, cross-entropy, GELU), written so that host compilers vectorise it.
//
// glibc's expf is a scalar call, and it dominated the softmax and GELU kernels on the host. For
// float this is Cody–Waite range reduction x = n·ln2 + r, |r| ≤ ln2/2, then e^r by its Taylor
// polynomial to degree 7 (truncation error < 6e-9 relative, below float's rounding) scaled by 2^n
// built in the exponent bits: within 2 ulp of the true value over the whole float range.
// Inputs are clamped to [-87, 88], so results stay finite and normal (e^-87 ≈ 1.6e-38 stands for 0
// in a sum of exponentials; e^88 ≈ 1.65e38 stands for overflow in 1 + e^x). Double precision and
// GPU builds, whose exp is already fast, use the library exp.
#pragma once

#include "core/kokkos_compat.hpp"

#include <bit>
#include <cstdint>
#include <type_traits>

namespace meshtrain {

template <class Real>
KOKKOS_INLINE_FUNCTION Real fast_exp(Real x) {
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || defined(KOKKOS_ENABLE_SYCL)
  return kmath::exp(x);
#else
  if constexpr (!std::is_same_v<Real, float>) {
    return kmath::exp(x);
  } else {
    // Ternaries, not fmin/fmax: Kokkos 3.4's fmin/fmax keep GCC from vectorising the loop.
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    // Round x / ln2 to the nearest integer with the 1.5·2^23 trick: branch-free, so loops vectorise.
    const float shifter = 12582912.0f;
    const float nf = (x * 1.44269504088896341f + shifter) - shifter;
    const int n = static_cast<int>(nf);
    // ln2 split in two so that n·ln2_hi is exact (Cephes' constants).
    const float r = (x - nf * 0.693359375f) - nf * -2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const float scale = std::bit_cast<float>(static_cast<std::int32_t>((n + 127) << 23));
    return p * scale;
  }
#endif
}

}  // namespace meshtrain
