// The 16-bit storage types of the low-precision path (train.precision = bf16 | fp16), and the
// accumulation type every kernel computes in.
//
// bf16 (bfloat16): 1 sign, 8 exponent, 7 mantissa bits: float's range, unit roundoff u = 2^-8.
// fp16 (IEEE binary16): 1 sign, 5 exponent, 10 mantissa bits: largest finite 65504, smallest
// normal 2^-14, smallest subnormal 2^-24, u = 2^-11.
//
// They are storage only: a value is widened to float (exactly, implicitly) to compute, and a result
// is narrowed back (explicitly, rounded to nearest, ties to even) to store:
//   out(i) = Real(accum_t<Real>(a(i)) + accum_t<Real>(b(i)));
// Narrowing keeps NaN a NaN (quietened, sign kept) and ±Inf; fp16 overflows to ±Inf and rounds
// into its subnormals exactly. The conversions are integer bit manipulation plus two float
// operations whose results are normal numbers, so they give the same bits on the host and in CUDA
// device code, flush-to-zero or not.
//
// Kokkos-free on purpose: the cuBLAS wrapper (kernels/cublas_gemm.hpp) names these types too.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MESHTRAIN_HOST_DEVICE __host__ __device__ inline
#else
#define MESHTRAIN_HOST_DEVICE inline
#endif

namespace meshtrain {

namespace half_detail {

MESHTRAIN_HOST_DEVICE std::uint32_t bits_of(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
MESHTRAIN_HOST_DEVICE float float_of(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
MESHTRAIN_HOST_DEVICE std::uint64_t bits_of(double d) {
  std::uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}
MESHTRAIN_HOST_DEVICE double double_of(std::uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

// double → float rounded to odd (truncate, then set the last bit if anything was cut off). Rounding
// that result to a format with at least 2 fewer significand bits equals rounding the double directly
// (Boldo & Melquiond), so double → 16-bit conversions round once, not twice.
MESHTRAIN_HOST_DEVICE float round_to_odd_float(double d) {
  if (d != d) return static_cast<float>(d);   // NaN
  const float f = static_cast<float>(d);      // nearest; may be above |d| or infinite
  if (static_cast<double>(f) == d) return f;  // exact, including ±Inf and ±0
  std::uint32_t u = bits_of(f);
  const double af = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
  const double ad = d < 0 ? -d : d;
  if (af > ad) u -= 1;  // one step toward zero in magnitude: the truncated value (Inf → FLT_MAX)
  return float_of(u | 1u);
}

// The conversions below compute every case and select one (no early returns), so that host
// compilers vectorise the loops that call them.

// float → bf16 bits, round to nearest even: add half an ulp (minus one when the kept part is even,
// so that exact ties go down to the even value); a carry into the exponent is the correct rounding
// up, up to +Inf above the largest bf16. NaN: quietened, sign and top payload bits kept.
MESHTRAIN_HOST_DEVICE std::uint16_t bf16_bits_from_float(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (u >> 16) | 0x0040u;
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

MESHTRAIN_HOST_DEVICE float float_from_bf16_bits(std::uint16_t h) { return float_of(std::uint32_t(h) << 16); }

// float → fp16 bits, round to nearest even, by ranges of |f|:
//   normal in fp16 (2^-14 ≤ |f| < 65520): rebias the exponent by 127 − 15 = 112 and round the 13
//     bits dropped from the mantissa as bf16 does its 16;
//   below 2^-14 (fp16 subnormal or 0): |f| + 0.5 in float, whose ulp is 2^-24, rounds |f| to a
//     multiple k·2^-24 with ties to even k (0.5 is an even multiple); k ≤ 0x400 is the fp16
//     pattern (0x400 the smallest normal). Float subnormals flushed to 0 would give k = 0, their
//     correct rounding anyway, so flush-to-zero modes do not change the result;
//   ≥ 65520 = 65504 + half an ulp: the tie goes to the even neighbour 65536, i.e. +Inf;
//   Inf stays Inf; NaN stays NaN, quietened, top payload bits kept.
MESHTRAIN_HOST_DEVICE std::uint16_t fp16_bits_from_float(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  const std::uint32_t rebiased = a - (112u << 23);  // wraps for small a; not selected then
  const std::uint32_t normal = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;
  const std::uint32_t subnormal = bits_of(float_of(a) + 0.5f) - 0x3f000000u;
  std::uint32_t r = a >= 0x38800000u ? normal : subnormal;
  r = a >= 0x477ff000u ? 0x7c00u : r;
  r = a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : r;
  return static_cast<std::uint16_t>(sign | r);
}

// fp16 bits → float, exactly: normal values rebias the exponent; subnormals are m · 2^-24, computed
// as float(m) · 2^-24 from normal floats to a normal float (exact, and untouched by flush-to-zero).
MESHTRAIN_HOST_DEVICE float float_from_fp16_bits(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  const std::uint32_t normal = ((exponent + 112u) << 23) | (mantissa << 13);
  const std::uint32_t special = 0x7f800000u | (mantissa << 13);  // Inf, NaN
  const std::uint32_t subnormal = bits_of(static_cast<float>(mantissa) * 5.9604644775390625e-8f);
  // Blended with masks rather than ?:, which GCC turns back into a branch around the float multiply.
  const std::uint32_t is_subnormal = 0u - std::uint32_t(exponent == 0);
  const std::uint32_t is_special = 0u - std::uint32_t(exponent == 0x1f);
  const std::uint32_t r = (normal & ~(is_subnormal | is_special)) | (special & is_special) | (subnormal & is_subnormal);
  return float_of(sign | r);
}

}  // namespace half_detail

// bfloat16 storage. Widening to float is implicit (exact); narrowing from float, double or an
// integer is explicit and rounds to nearest even.
struct bf16 {
  std::uint16_t bits;

  bf16() = default;  // trivial: Kokkos value-initialises views of it to +0
  MESHTRAIN_HOST_DEVICE explicit bf16(float f) : bits(half_detail::bf16_bits_from_float(f)) {}
  MESHTRAIN_HOST_DEVICE explicit bf16(double d) : bf16(half_detail::round_to_odd_float(d)) {}
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  MESHTRAIN_HOST_DEVICE explicit bf16(I i) : bf16(static_cast<double>(i)) {}
  MESHTRAIN_HOST_DEVICE operator float() const { return half_detail::float_from_bf16_bits(bits); }

  MESHTRAIN_HOST_DEVICE static bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
};

// IEEE binary16 storage, with the same conversions as bf16.
struct fp16 {
  std::uint16_t bits;

  fp16() = default;
  MESHTRAIN_HOST_DEVICE explicit fp16(float f) : bits(half_detail::fp16_bits_from_float(f)) {}
  MESHTRAIN_HOST_DEVICE explicit fp16(double d) : fp16(half_detail::round_to_odd_float(d)) {}
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  MESHTRAIN_HOST_DEVICE explicit fp16(I i) : fp16(static_cast<double>(i)) {}
  MESHTRAIN_HOST_DEVICE operator float() const { return half_detail::float_from_fp16_bits(bits); }

  MESHTRAIN_HOST_DEVICE static fp16 from_bits(std::uint16_t b) {
    fp16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2);
static_assert(std::is_trivially_copyable_v<bf16> && std::is_trivial_v<fp16>);

template <class Real>
inline constexpr bool is_low_precision_v = std::is_same_v<Real, bf16> || std::is_same_v<Real, fp16>;

// The type kernels compute and reduce in: float for the 16-bit types, the type itself otherwise
// (so float and double kernels are unchanged by the low-precision path).
template <class Real>
using accum_t = std::conditional_t<is_low_precision_v<Real>, float, Real>;

// The train.precision spelling of a storage type, for logs and messages.
template <class Real>
constexpr const char* precision_name() {
  if constexpr (std::is_same_v<Real, bf16>)
    return "bf16";
  else if constexpr (std::is_same_v<Real, fp16>)
    return "fp16";
  else if constexpr (std::is_same_v<Real, float>)
    return "fp32";
  else
    return "fp64";
}

// Unit roundoff (half an ulp of 1) of a storage type: the relative error of one rounding.
template <class Real>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<Real, bf16>)
    return 1.0 / 256;  // 2^-8
  else if constexpr (std::is_same_v<Real, fp16>)
    return 1.0 / 2048;  // 2^-11
  else if constexpr (std::is_same_v<Real, float>)
    return 5.9604644775390625e-8;  // 2^-24
  else
    return 1.1102230246251565e-16;  // 2^-53
}

}  // namespace meshtrain
