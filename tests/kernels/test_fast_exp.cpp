// fast_exp against the C library's exp evaluated in long double: within 2 ulp over the range the
// kernels use, and clamped (finite, normal) outside it.
#include "kernels/fast_math.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace meshtrain {
namespace test_fast_exp {

TEST(FastExp, WithinTwoUlpOverTheKernelsRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.000731f) {
    const long double want = std::exp(static_cast<long double>(x));
    const float got = fast_exp(x);
    const double ulp = std::nextafter(float(want), std::numeric_limits<float>::infinity()) - float(want);
    worst = std::max(worst, double(std::fabs(static_cast<long double>(got) - want) / ulp));
  }
  EXPECT_LE(worst, 2.0) << "worst error in ulp";
}

TEST(FastExp, ExactAtZeroAndClampedOutside) {
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_GT(fast_exp(-1000.0f), 0.0f);
  EXPECT_LT(fast_exp(-1000.0f), 2e-38f);
  EXPECT_TRUE(std::isfinite(fast_exp(1000.0f)));
  EXPECT_GT(fast_exp(1000.0f), 1e38f);
  // Doubles go to the library exp unchanged.
  EXPECT_EQ(fast_exp(0.5), std::exp(0.5));
}

}  // namespace test_fast_exp
}  // namespace meshtrain
