// The 16-bit storage types: every bit pattern widened and narrowed back, float and double values
// rounded to bf16 and fp16 against a reference built independently (decode every pattern with
// ldexp, then pick the nearest value by searching the sorted table, ties to the even pattern), the
// compiler's own _Float16 where it has one, and PyTorch's roundings (make_half_reference.py).
#include "core/half_types.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

namespace meshtrain {
namespace {

// The fields of each format, to decode patterns without the code under test.
struct Format {
  int exponent_bits, mantissa_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
};
constexpr Format kBf16{8, 7}, kFp16{5, 10};

// (−1)^s · 2^(e−bias) · (1 + m/2^p), subnormals 2^(1−bias) · m/2^p, e all ones: Inf or NaN.
double decode(Format f, std::uint16_t bits) {
  const int p = f.mantissa_bits;
  const bool negative = bits >> 15;
  const int e = (bits >> p) & ((1 << f.exponent_bits) - 1);
  const int m = bits & ((1 << p) - 1);
  double magnitude;
  if (e == (1 << f.exponent_bits) - 1) {
    magnitude = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    magnitude = std::ldexp(double(m), 1 - f.bias() - p);
  } else {
    magnitude = std::ldexp(double((1 << p) + m), e - f.bias() - p);
  }
  return negative ? -magnitude : magnitude;
}

template <class Half>
Format format_of() {
  return std::is_same_v<Half, bf16> ? kBf16 : kFp16;
}

// Round-to-nearest-even by search: the non-negative finite values in order (pattern i has value
// table[i] for i up to the largest finite), plus one entry past the largest finite standing for
// +Inf at the next power of two, as IEEE rounding treats overflow.
class Reference {
 public:
  explicit Reference(Format f) {
    const std::uint16_t inf = std::uint16_t(((1 << f.exponent_bits) - 1) << f.mantissa_bits);
    for (std::uint32_t b = 0; b < inf; ++b) values_.push_back(decode(f, std::uint16_t(b)));
    const double top = values_.back(), ulp = top - values_[values_.size() - 2];
    values_.push_back(top + ulp);  // pattern `inf`
  }
  std::uint16_t round(double x) const {
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(x);
    if (a >= values_.back()) return sign | std::uint16_t(values_.size() - 1);  // Inf
    const auto hi = std::upper_bound(values_.begin(), values_.end(), a);       // first value > a
    const std::size_t i = std::size_t(hi - values_.begin()) - 1;               // values_[i] <= a
    if (values_[i] == a) return sign | std::uint16_t(i);
    const double below = a - values_[i], above = values_[i + 1] - a;
    std::size_t pick = below < above ? i : above < below ? i + 1 : (i % 2 == 0 ? i : i + 1);
    return sign | std::uint16_t(pick);
  }

 private:
  std::vector<double> values_;
};

template <class Half>
class HalfTypes : public ::testing::Test {};
using Halves = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(HalfTypes, Halves);

TYPED_TEST(HalfTypes, EveryPatternWidensExactlyAndNarrowsBack) {
  using H = TypeParam;
  const Format f = format_of<H>();
  int nans = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const H h = H::from_bits(std::uint16_t(b));
    const float wide = h;
    const double expected = decode(f, std::uint16_t(b));
    if (std::isnan(expected)) {
      ++nans;
      ASSERT_TRUE(std::isnan(wide)) << std::hex << b;
      const H back(wide);
      ASSERT_TRUE(std::isnan(float(back))) << std::hex << b;
      ASSERT_EQ(back.bits & 0x8000, b & 0x8000) << "NaN keeps its sign: " << std::hex << b;
      continue;
    }
    ASSERT_EQ(double(wide), expected) << std::hex << b;
    ASSERT_EQ(std::signbit(wide), bool(b & 0x8000)) << std::hex << b;  // −0 stays −0
    ASSERT_EQ(H(wide).bits, b) << std::hex << b;
    ASSERT_EQ(H(double(wide)).bits, b) << std::hex << b;
  }
  // 2 signs × (2^mantissa_bits − 1) NaN payloads: the decode above found them all.
  EXPECT_EQ(nans, 2 * ((1 << f.mantissa_bits) - 1));
}

// Floats (hi << 13) | lo for every hi and a handful of lo: with lo = 0 this covers every exact tie
// of both formats (fp16 normals cut at bit 13, bf16 at bit 16, fp16 subnormals higher still), and
// the lo next to 0 and 0x1fff the values one float ulp either side of each tie.
template <class F>
void for_rounding_cases(F&& check) {
  const std::uint32_t lows[] = {0, 1, 2, 0x0fff, 0x1000, 0x1001, 0x1ffe, 0x1fff, 0x0a5a};
  for (std::uint32_t hi = 0; hi < (1u << 19); ++hi) {
    for (std::uint32_t lo : lows) check(std::bit_cast<float>((hi << 13) | lo));
  }
}

TYPED_TEST(HalfTypes, FloatsRoundToNearestEvenAsTheReference) {
  using H = TypeParam;
  const Reference ref(format_of<H>());
  long checked = 0;
  for_rounding_cases([&](float x) {
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(float(H(x))));
      return;
    }
    ASSERT_EQ(H(x).bits, ref.round(x)) << "x = " << x << " (bits " << std::hex << std::bit_cast<std::uint32_t>(x)
                                       << ")";
    ++checked;
  });
  EXPECT_GT(checked, 4'000'000);
}

// Doubles round once, directly: 1 + 2^-8 + 2^-30 lies just above a bf16 tie; rounding it to float
// first would land on the tie and then on 1 (even), the direct rounding gives 1 + 2^-7.
TYPED_TEST(HalfTypes, DoublesRoundOnceAsTheReference) {
  using H = TypeParam;
  const Reference ref(format_of<H>());
  if constexpr (std::is_same_v<H, bf16>) {
    EXPECT_EQ(bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)).bits, 0x3f81);
    EXPECT_EQ(bf16(float(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30))).bits, 0x3f80);
  } else {
    EXPECT_EQ(fp16(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)).bits, 0x3c01);
  }
  std::mt19937_64 rng(17);
  for (int i = 0; i < 200000; ++i) {
    // Near a tie of the format: a float with a random pattern, nudged by a few double ulps.
    const float base = std::bit_cast<float>(std::uint32_t(rng()) & 0xffffe000u);
    if (!std::isfinite(base)) continue;
    const std::uint32_t tie_bit = std::is_same_v<H, bf16> ? 0x8000u : 0x1000u;
    const double tie = std::bit_cast<float>(std::bit_cast<std::uint32_t>(base) | tie_bit);
    const double x = std::nextafter(tie, (rng() & 1) ? 1e300 : -1e300);
    ASSERT_EQ(H(x).bits, ref.round(x)) << "x = " << x;
    ASSERT_EQ(H(tie).bits, ref.round(tie)) << "x = " << tie;
  }
  EXPECT_EQ(H(1e300).bits, ref.round(1e300));
  EXPECT_TRUE(std::isinf(float(H(1e300))) && std::isinf(float(H(-1e300))));
  EXPECT_TRUE(std::isnan(float(H(std::numeric_limits<double>::quiet_NaN()))));
}

#if defined(__SSE2__)
// GPUs built with fast math, and hosts with FTZ/DAZ set, flush subnormal floats to zero. The
// conversions must give the same bits there: expected bits are computed first in the default mode,
// then the conversions run with MXCSR's flush-to-zero and denormals-are-zero bits set.
TYPED_TEST(HalfTypes, SameBitsWithFlushToZero) {
  using H = TypeParam;
  std::vector<float> xs;
  for_rounding_cases([&](float x) { xs.push_back(x); });
  std::vector<std::uint16_t> narrow(xs.size());
  std::vector<std::uint32_t> widen(65536);
  for (std::size_t i = 0; i < xs.size(); ++i) narrow[i] = H(xs[i]).bits;
  for (std::uint32_t b = 0; b < 65536; ++b)
    widen[b] = std::bit_cast<std::uint32_t>(float(H::from_bits(std::uint16_t(b))));
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  std::vector<std::uint16_t> narrow_ftz(xs.size());
  std::vector<std::uint32_t> widen_ftz(65536);
  for (std::size_t i = 0; i < xs.size(); ++i) narrow_ftz[i] = H(xs[i]).bits;
  for (std::uint32_t b = 0; b < 65536; ++b)
    widen_ftz[b] = std::bit_cast<std::uint32_t>(float(H::from_bits(std::uint16_t(b))));
  _mm_setcsr(saved);
  for (std::size_t i = 0; i < xs.size(); ++i)
    ASSERT_EQ(narrow_ftz[i], narrow[i]) << "x bits " << std::hex << std::bit_cast<std::uint32_t>(xs[i]);
  EXPECT_EQ(widen_ftz, widen);
}
#endif

TEST(HalfTypes, Fp16EdgesOfTheRange) {
  EXPECT_EQ(fp16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(fp16(65519.996f).bits, 0x7bff);  // just under the tie: stays finite
  EXPECT_EQ(fp16(65520.0f).bits, 0x7c00);    // the tie goes to the even neighbour, +Inf
  EXPECT_EQ(fp16(-1e10f).bits, 0xfc00);
  EXPECT_EQ(fp16(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(fp16(std::ldexp(1.0f, -25)).bits, 0x0000);  // tie with 0: even
  EXPECT_EQ(fp16(std::ldexp(1.5f, -25)).bits, 0x0001);
  EXPECT_EQ(fp16(std::ldexp(1023.5f, -24)).bits, 0x0400);  // rounds up into the normals
  EXPECT_EQ(fp16(-0.0f).bits, 0x8000);
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()).bits, 0x7f80);  // above bf16's largest: +Inf
  EXPECT_EQ(bf16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
}

#if defined(__FLT16_MAX__)
// The compiler's conversion (libgcc or F16C), an implementation independent of this one.
TEST(HalfTypes, Fp16AgreesWithTheCompilersFloat16) {
  for_rounding_cases([](float x) {
    const _Float16 h = static_cast<_Float16>(x);
    const std::uint16_t expected = std::bit_cast<std::uint16_t>(h);
    if (std::isnan(x)) return;
    ASSERT_EQ(fp16(x).bits, expected) << "x = " << x;
  });
}
#endif

TEST(HalfTypes, AgreeWithPyTorch) {
  std::ifstream in(MESHTRAIN_HALF_REFERENCE, std::ios::binary);
  ASSERT_TRUE(in) << "no " << MESHTRAIN_HALF_REFERENCE << ": run the half_reference_make test first";
  std::uint32_t count = 0;
  in.read(reinterpret_cast<char*>(&count), 4);
  ASSERT_GT(count, 100000u);
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint32_t fbits;
    std::uint16_t bbits, hbits;
    in.read(reinterpret_cast<char*>(&fbits), 4);
    in.read(reinterpret_cast<char*>(&bbits), 2);
    in.read(reinterpret_cast<char*>(&hbits), 2);
    ASSERT_TRUE(in) << "record " << i;
    const float x = std::bit_cast<float>(fbits);
    if (std::isnan(x)) {  // PyTorch's NaN patterns vary with its code path; NaN-ness is the contract
      EXPECT_TRUE(std::isnan(float(bf16(x))) && std::isnan(float(fp16(x))));
      continue;
    }
    ASSERT_EQ(bf16(x).bits, bbits) << "bf16 of " << x << " (bits " << std::hex << fbits << ")";
    ASSERT_EQ(fp16(x).bits, hbits) << "fp16 of " << x << " (bits " << std::hex << fbits << ")";
  }
}

TEST(HalfTypes, TraitsAndNames) {
  static_assert(std::is_same_v<accum_t<bf16>, float> && std::is_same_v<accum_t<fp16>, float>);
  static_assert(std::is_same_v<accum_t<float>, float> && std::is_same_v<accum_t<double>, double>);
  EXPECT_STREQ(precision_name<bf16>(), "bf16");
  EXPECT_STREQ(precision_name<fp16>(), "fp16");
  EXPECT_STREQ(precision_name<float>(), "fp32");
  EXPECT_EQ(unit_roundoff<bf16>(), std::ldexp(1.0, -8));
  EXPECT_EQ(unit_roundoff<fp16>(), std::ldexp(1.0, -11));
}

}  // namespace
}  // namespace meshtrain
