// The initialisation kernel's fast normal draw against Random123's Box–Muller with the host's libm:
// within 2^-48 relative everywhere, and where it answers a float, that float bit for bit.
#include "model/impl/fast_normal.hpp"

#include <Random123/boxmuller.hpp>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace meshtrain {
namespace test_fast_normal {

struct Tally {
  double worst_relative = 0;  // of the double, fast against Random123
  long draws = 0, undecided = 0;
};

// One (u0, u1): the fast double against Random123's, and the fast float (if any) against the
// float of scale · Random123's double, for several standard deviations.
void check(std::uint64_t u0, std::uint64_t u1, Tally& tally) {
  const double a = r123::uneg11<double>(u0), b = r123::u01<double>(u1);
  const double want = r123::boxmuller(u0, u1).x;
  const double got = fast_normal::box_muller(a, b);
  if (want != 0) tally.worst_relative = std::max(tally.worst_relative, std::fabs(got - want) / std::fabs(want));
  for (const double scale : {0.02, 0.02 / std::sqrt(24.0), 0.02 / std::sqrt(96.0), 1.0}) {
    const float f = fast_normal::scaled_normal_or_nan(scale, a, b);
    ++tally.draws;
    if (std::isnan(f)) {
      ++tally.undecided;
      continue;
    }
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f), std::bit_cast<std::uint32_t>(float(scale * want)))
        << "u0 " << u0 << " u1 " << u1 << " scale " << scale;
  }
}

TEST(FastNormal, MatchesRandom123OnRandomWords) {
  std::mt19937_64 words(20261201);
  Tally tally;
  for (int i = 0; i < (1 << 21); ++i) {
    const std::uint64_t u0 = words(), u1 = words();
    check(u0, u1, tally);
    if (HasFatalFailure()) return;
  }
  EXPECT_LT(tally.worst_relative, 0x1p-48);
  // The fallback runs, and rarely: about 2 · 2^-36 / 2^-24 ≈ 5e-4 of the draws.
  EXPECT_GT(tally.undecided, 0);
  EXPECT_LT(double(tally.undecided) / double(tally.draws), 2e-3);
}

// The ends of both uniforms: a = ±1 and a → 0 (sin's zeros and its reduction near π), b → 0
// (the largest radii) and b = 1 (radius zero: the sign of zero is left to Random123).
TEST(FastNormal, MatchesRandom123AtTheEnds) {
  std::vector<std::uint64_t> ends;
  for (std::uint64_t centre :
       {std::uint64_t(0), std::uint64_t(1) << 62, std::uint64_t(1) << 63, std::uint64_t(3) << 62}) {
    for (std::uint64_t d = 0; d < 64; ++d) {
      ends.push_back(centre + d);
      ends.push_back(centre - d - 1);
    }
    for (int shift = 1; shift < 64; ++shift) {
      ends.push_back(centre + (std::uint64_t(1) << shift));
      ends.push_back(centre - (std::uint64_t(1) << shift));
    }
  }
  Tally tally;
  for (const std::uint64_t u0 : ends) {
    for (const std::uint64_t u1 : ends) {
      check(u0, u1, tally);
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_LT(tally.worst_relative, 0x1p-48);
  // b = u01(2^64 − 1) = 1: the radius and the value are zero, which the fast path never answers.
  EXPECT_TRUE(std::isnan(fast_normal::scaled_normal_or_nan(0.02, r123::uneg11<double>(std::uint64_t(1) << 40),
                                                           r123::u01<double>(~std::uint64_t(0)))));
}

}  // namespace test_fast_normal
}  // namespace meshtrain
