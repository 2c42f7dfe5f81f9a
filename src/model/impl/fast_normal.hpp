// The initialisation kernel's normal draw without library calls, and the test of when it is exact.
//
// An initial weight is float(scale · n) with n Random123's double Box–Muller, n = sin(fl(π·a)) ·
// sqrt(−2·log b), a = uneg11(u0) ∈ [−1, 1], b = u01(u1) ∈ (0, 1] (model/init.cpp). On the host
// that is glibc's sincos and log: ~35 ns an element, and scalar calls, so the loop does not
// vectorise. box_muller_fast computes n with no calls:
//   sin: y = fl(π·a) = k·π/2 + t, k = round(2y/π) ∈ −2…2, t = (y − k·P1) − k·P2 with π/2 = P1 + P2
//        to 106 bits (y − k·P1 is exact by Sterbenz's lemma), then sin t or cos t (|t| ≲ π/4) by
//        their Taylor series to degree 15 and 16 (truncation below 1e-16 relative);
//   log: b = 2^e·m, m ∈ [√½, √2), log b = e·ln2 + 2·atanh z, z = (m − 1)/(m + 1) (m − 1 exact),
//        |z| ≤ 0.172, the atanh series to z^21 (truncation below 1e-17 relative).
// Both are within a few 1e-16 relative of the true functions, as glibc's are, so n differs from
// the libm n by under 2^-48 relative (the tests measure it against Random123 and glibc).
//
// scaled_normal_or_nan then rounds scale·n to float only where that double lies farther than
// 2^-36 of its size from every float rounding boundary: there both doubles round to the same float,
// which is the libm path's — on any host or GPU whose double arithmetic is IEEE, fused
// multiply-adds included. Elsewhere (about 4 elements in 10^4, and the zeros of n) it returns NaN,
// and the caller computes that element through Random123 and the library functions.
#pragma once

#include "core/half_types.hpp"
#include "core/kokkos_compat.hpp"

#include <cstdint>

namespace meshtrain::fast_normal {

using half_detail::bits_of;
using half_detail::double_of;
using half_detail::float_of;

// sin y for |y| ≤ π + 1e-15.
KOKKOS_INLINE_FUNCTION double sin_reduced(double y) {
  // Round to the nearest integer by adding and subtracting 1.5·2^52: branch-free, so loops vectorise.
  const double shifter = 6755399441055744.0;
  const double k = (y * 0.6366197723675814 + shifter) - shifter;  // 2/π
  const double t = (y - k * 1.5707963267948966) - k * 6.123233995736766e-17;
  const double t2 = t * t;
  double s = -1.0 / 1307674368000.0;  // −1/15!
  s = s * t2 + 1.0 / 6227020800.0;
  s = s * t2 - 1.0 / 39916800.0;
  s = s * t2 + 1.0 / 362880.0;
  s = s * t2 - 1.0 / 5040.0;
  s = s * t2 + 1.0 / 120.0;
  s = s * t2 - 1.0 / 6.0;
  s = t + t * t2 * s;
  double c = 1.0 / 20922789888000.0;  // 1/16!
  c = c * t2 - 1.0 / 87178291200.0;
  c = c * t2 + 1.0 / 479001600.0;
  c = c * t2 - 1.0 / 3628800.0;
  c = c * t2 + 1.0 / 40320.0;
  c = c * t2 - 1.0 / 720.0;
  c = c * t2 + 1.0 / 24.0;
  c = 1.0 - 0.5 * t2 + t2 * t2 * c;
  // sin(k·π/2 + t) for k mod 4 = 0, 1, 2, 3: sin t, cos t, −sin t, −cos t.
  const std::int64_t quadrant = std::int64_t(k) & 3;
  const double r = (quadrant & 1) ? c : s;
  return (quadrant & 2) ? -r : r;
}

// log b for positive normal b.
KOKKOS_INLINE_FUNCTION double log_normal_range(double b) {
  const std::uint64_t bits = bits_of(b);
  std::int64_t e = std::int64_t((bits >> 52) & 0x7ff) - 1023;
  double m = double_of((bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);  // [1, 2)
  const bool high = m > 1.4142135623730951;
  m = high ? 0.5 * m : m;
  e = high ? e + 1 : e;
  const double z = (m - 1.0) / (m + 1.0), z2 = z * z;
  double p = 1.0 / 21.0;
  p = p * z2 + 1.0 / 19.0;
  p = p * z2 + 1.0 / 17.0;
  p = p * z2 + 1.0 / 15.0;
  p = p * z2 + 1.0 / 13.0;
  p = p * z2 + 1.0 / 11.0;
  p = p * z2 + 1.0 / 9.0;
  p = p * z2 + 1.0 / 7.0;
  p = p * z2 + 1.0 / 5.0;
  p = p * z2 + 1.0 / 3.0;
  p = p * z2 + 1.0;
  return double(e) * 0.6931471805599453 + 2.0 * z * p;
}

// Random123's boxmuller(u0, u1).x from a = uneg11(u0), b = u01(u1), to under 2^-48 relative.
KOKKOS_INLINE_FUNCTION double box_muller(double a, double b) {
  const double pi = 3.1415926535897932;  // Random123's π, rounded to double as it is there
  return sin_reduced(pi * a) * kmath::sqrt(-2.0 * log_normal_range(b));
}

// float(scale · n) where that is certain to be the libm path's float, else NaN (see above).
KOKKOS_INLINE_FUNCTION float scaled_normal_or_nan(double scale, double a, double b) {
  const double v = scale * box_muller(a, b);
  const float f = float(v);
  // Half the gap to the next float toward zero, the smaller of the two gaps around f: v rounds to f
  // while within it of f. For f = ±0 the neighbour's bits are a NaN, and so is the comparison.
  const double toward_zero = double(float_of(bits_of(f) - 1u));
  const double half_gap = 0.5 * (kmath::fabs(double(f)) - kmath::fabs(toward_zero));
  const double margin = 0x1p-36 * kmath::fabs(v);
  const bool certain = kmath::fabs(v - double(f)) + margin < half_gap;
  return certain ? f : float_of(0x7fc00000u);
}

}  // namespace meshtrain::fast_normal
