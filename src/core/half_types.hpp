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
// into its subnormals exactly. The conversions are integer bit manipulation (plus exact float
// arithmetic on normal numbers), so they give the same bits on the host and in CUDA device code,
// flush-to-zero or not.
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

// double → float rounded to odd (truncate, then set the last bit if anything was cut off). Rounding
// that result to a format with at least 2 fewer significand bits equals rounding the double directly
// (Boldo & Melquiond), so double → 16-bit conversions round once, not twice.
MESHTRAIN_HOST_DEVICE float round_to_odd_float(double d) {
  if (d != d) return static_cast<float>(d);  // NaN
  const float f = static_cast<float>(d);     // nearest; may be above |d| or infinite
  if (static_cast<double>(f) == d) return f;  // exact, including ±Inf and ±0
  std::uint32_t u = bits_of(f);
  const double af = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
  const double ad = d < 0 ? -d : d;
  if (af > ad) u -= 1;  // one step toward zero in magnitude: the truncated value (Inf → FLT_MAX)
  return float_of(u | 1u);
}

// float → bf16 bits, round to nearest even: add half an ulp (minus one when the kept part is even,
// so that exact ties go down to the even value); a carry into the exponent is the correct rounding
// up, up to +Inf above the largest bf16.
MESHTRAIN_HOST_DEVICE std::uint16_t bf16_bits_from_float(float f) {
  const std::uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

MESHTRAIN_HOST_DEVICE float float_from_bf16_bits(std::uint16_t h) { return float_of(std::uint32_t(h) << 16); }

// float → fp16 bits, round to nearest even, in three ranges of |f|.
MESHTRAIN_HOST_DEVICE std::uint16_t fp16_bits_from_float(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // Inf stays Inf; NaN stays NaN, quietened, top payload bits kept
    return static_cast<std::uint16_t>(sign | (a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : 0x7c00u));
  }
  // ≥ 65520 = 65504 + half an ulp: the tie rounds to the even neighbour 65536, which is +Inf.
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // normal in fp16 (≥ 2^-14): rebias the exponent by 127 − 15 = 112
    const std::uint32_t rebiased = a - (112u << 23);
    return static_cast<std::uint16_t>(sign | ((rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13));
  }
  // Subnormal in fp16: the result is round(|f| / 2^-24). |f| = m · 2^(e−150) with the 24-bit
  // significand m, so the result is m >> (126 − e), rounded on the bits shifted out.
  const std::uint32_t e = a >> 23;
  if (e < 102) return static_cast<std::uint16_t>(sign);  // |f| < 2^-25: rounds to ±0
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126 - e;  // 14 … 24
  std::uint32_t r = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (r & 1u))) ++r;  // r = 0x400 is the smallest normal: correct
  return static_cast<std::uint16_t>(sign | r);
}

MESHTRAIN_HOST_DEVICE float float_from_fp16_bits(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN
  if (exponent != 0) return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Subnormal (or zero): mantissa · 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return float_of(sign | bits_of(magnitude));
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
  if constexpr (std::is_same_v<Real, bf16>) return "bf16";
  else if constexpr (std::is_same_v<Real, fp16>) return "fp16";
  else if constexpr (std::is_same_v<Real, float>) return "fp32";
  else return "fp64";
}

// Unit roundoff (half an ulp of 1) of a storage type: the relative error of one rounding.
template <class Real>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<Real, bf16>) return 1.0 / 256;        // 2^-8
  else if constexpr (std::is_same_v<Real, fp16>) return 1.0 / 2048;  // 2^-11
  else if constexpr (std::is_same_v<Real, float>) return 5.9604644775390625e-8;  // 2^-24
  else return 1.1102230246251565e-16;                                          // 2^-53
}

}  // namespace meshtrain
