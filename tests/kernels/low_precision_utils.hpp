// Helpers for comparing a 16-bit kernel with the float kernel on the same inputs: inputs rounded to
// the 16-bit type once, and distances in units in the last place of that type. Why one ulp is the
// bound: test_low_precision.cpp's header comment.
#pragma once

#include "kernel_test_utils.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

namespace meshtrain::test {

// x rounded to H (once, from double), as doubles: exactly representable in H, float and double.
template <class H>
Host rounded(const Host& x) {
  Host r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = float(H(x[i]));
  return r;
}

// Distance in units in the last place of H between two values of H (0 across ±0).
template <class H>
long ulp_distance(double a, double b) {
  auto ordered = [](double x) {
    const std::uint16_t bits = H(x).bits;
    const long magnitude = bits & 0x7fff;
    return (bits & 0x8000) ? -magnitude : magnitude;
  };
  return std::labs(ordered(a) - ordered(b));
}

// Returns the worst ulp distance of actual (values of H) from expected (float results) rounded to H.
template <class H>
long worst_ulps(const Host& actual, const Host& expected, std::size_t* where = nullptr) {
  long worst = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const long d =
        std::isnan(actual[i]) || std::isnan(expected[i]) ? 1L << 20 : ulp_distance<H>(actual[i], float(H(expected[i])));
    if (d > worst) {
      worst = d;
      if (where) *where = i;
    }
  }
  return worst;
}

inline constexpr long kOneUlp = 1;

template <class H>
void expect_within_ulps(const Host& actual, const Host& expected, long ulps, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  ASSERT_FALSE(actual.empty()) << what;
  std::size_t at = 0;
  const long worst = worst_ulps<H>(actual, expected, &at);
  EXPECT_LE(worst, ulps) << what << " (" << precision_name<H>() << "): " << worst << " ulps at element " << at
                         << ": actual " << actual[at] << ", float kernel " << expected[at];
}

}  // namespace meshtrain::test
