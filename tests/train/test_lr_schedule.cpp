// Learning-rate schedule and clipping factor (share/docs/usage.md, Model and optimizer) against numbers worked out by
// hand (cosines of simple angles, evaluated separately and written here as literals).
#include "core/config.hpp"
#include "optim/lr_schedule.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace meshtrain {
namespace test_lr_schedule {

// |got − want| ≤ rel·|want| (or ≤ rel when want is 0).
void expect_rel(double got, double want, double rel, const std::string& what) {
  const double bound = want == 0 ? rel : rel * std::fabs(want);
  EXPECT_LE(std::fabs(got - want), bound) << what << ": got " << got << ", want " << want;
}

constexpr double kRel = 1e-14;

OptimConfig optim(double lr, double min_lr, std::int64_t warmup, const std::string& decay) {
  OptimConfig o;
  o.lr = lr;
  o.min_lr = min_lr;
  o.warmup_steps = warmup;
  o.decay = parse_name<LrDecay>(decay);
  return o;
}

TEST(LearningRate, LinearWarmup) {
  // lr·(i+1)/warmup for i < warmup, for both decays.
  for (const std::string decay : {"cosine", "constant"}) {
    const auto o = optim(6e-4, 6e-5, 4, decay);
    expect_rel(learning_rate(o, 100, 0), 1.5e-4, kRel, decay + " i=0");
    expect_rel(learning_rate(o, 100, 1), 3.0e-4, kRel, decay + " i=1");
    expect_rel(learning_rate(o, 100, 2), 4.5e-4, kRel, decay + " i=2");
    expect_rel(learning_rate(o, 100, 3), 6.0e-4, kRel, decay + " i=3");
  }
  // warm-up 1: the first update already runs at lr.
  expect_rel(learning_rate(optim(1e-3, 1e-4, 1, "cosine"), 50, 0), 1e-3, kRel, "warmup 1, i=0");
}

TEST(LearningRate, CosineAtKnownPoints) {
  // lr = 1e-3, min_lr = 1e-4, warmup 10, 110 steps: p = (i − 10) / 100.
  const auto o = optim(1e-3, 1e-4, 10, "cosine");
  const std::int64_t steps = 110;
  expect_rel(learning_rate(o, steps, 10), 1e-3, kRel, "p = 0 gives lr");
  // p = 0.25: 1e-4 + 0.45e-3·(1 + √2/2)
  expect_rel(learning_rate(o, steps, 35), 8.681980515339464e-4, kRel, "p = 0.25");
  expect_rel(learning_rate(o, steps, 60), 5.5e-4, kRel, "p = 0.5 gives (lr + min_lr)/2");
  // p = 0.75: 1e-4 + 0.45e-3·(1 − √2/2)
  expect_rel(learning_rate(o, steps, 85), 2.3180194846605365e-4, kRel, "p = 0.75");
  // p = 0.99 (the last update): 1e-4 + 0.45e-3·(1 + cos 0.99π)
  expect_rel(learning_rate(o, steps, 109), 1.0022204783542078e-4, kRel, "p = 0.99");
  expect_rel(learning_rate(o, steps, 110), 1e-4, kRel, "p = 1 gives min_lr");
  // Non-increasing from the peak to the floor, and always within [min_lr, lr].
  double previous = learning_rate(o, steps, 10);
  for (std::int64_t i = 11; i <= steps; ++i) {
    const double lr = learning_rate(o, steps, i);
    EXPECT_LE(lr, previous) << "i = " << i;
    EXPECT_GE(lr, 1e-4 * (1 - kRel)) << "i = " << i;
    previous = lr;
  }
}

TEST(LearningRate, Constant) {
  // min_lr is ignored by the constant schedule.
  const auto o = optim(2e-3, 1e-5, 3, "constant");
  expect_rel(learning_rate(o, 50, 0), 2e-3 / 3, kRel, "warm-up i=0");
  expect_rel(learning_rate(o, 50, 1), 4e-3 / 3, kRel, "warm-up i=1");
  for (std::int64_t i : {2, 3, 4, 25, 49, 50})
    expect_rel(learning_rate(o, 50, i), 2e-3, kRel, "i=" + std::to_string(i));
  const auto no_warmup = optim(5e-4, 0, 0, "constant");
  for (std::int64_t i : {0, 1, 7, 99}) expect_rel(learning_rate(no_warmup, 100, i), 5e-4, kRel, "no warm-up");
}

TEST(LearningRate, NoWarmupCosine) {
  // warmup_steps = 0: update 0 runs at lr, p = i / steps.
  const auto o = optim(1e-3, 0.0, 0, "cosine");
  expect_rel(learning_rate(o, 10, 0), 1e-3, kRel, "i = 0");
  expect_rel(learning_rate(o, 10, 5), 5e-4, kRel, "p = 0.5");
  // p = 0.9: 0.5e-3·(1 + cos 0.9π)
  expect_rel(learning_rate(o, 10, 9), 2.4471741852423235e-05, 1e-12, "p = 0.9");
  EXPECT_NEAR(learning_rate(o, 10, 10), 0.0, 1e-18) << "p = 1 gives min_lr = 0";
  const auto floor = optim(1e-3, 2e-4, 0, "cosine");
  expect_rel(learning_rate(floor, 4, 2), 6e-4, kRel, "p = 0.5 with min_lr");
}

TEST(LearningRate, StepsEqualWarmupUsesMaxOneGuard) {
  // steps == warmup: the denominator max(1, steps − warmup) is 1, no division by zero.
  const auto o = optim(1e-3, 1e-4, 5, "cosine");
  const double ramp[] = {2e-4, 4e-4, 6e-4, 8e-4, 1e-3};
  for (std::int64_t i = 0; i < 5; ++i) expect_rel(learning_rate(o, 5, i), ramp[i], kRel, "ramp i=" + std::to_string(i));
  const double at_end = learning_rate(o, 5, 5);  // p = 0 / 1
  EXPECT_TRUE(std::isfinite(at_end));
  expect_rel(at_end, 1e-3, kRel, "i = warmup, p = 0");
  expect_rel(learning_rate(o, 5, 6), 1e-4, kRel, "i = warmup + 1, p = 1");
  // steps below warmup: still finite and still the warm-up ramp.
  const auto long_warmup = optim(1e-3, 1e-4, 8, "cosine");
  expect_rel(learning_rate(long_warmup, 4, 3), 5e-4, kRel, "steps < warmup, i = 3");
  EXPECT_TRUE(std::isfinite(learning_rate(long_warmup, 4, 8)));
  expect_rel(learning_rate(long_warmup, 4, 8), 1e-3, kRel, "steps < warmup, i = warmup");
  // steps == warmup + 1: one cosine update at p = 0.
  expect_rel(learning_rate(o, 6, 5), 1e-3, kRel, "steps = warmup + 1");
}

TEST(ClipScale, MinOfOneAndClipOverNormPlusEpsilon) {
  // clip / (norm + 1e-6), evaluated separately.
  expect_rel(clip_scale(2.0, 1.0), 0.499999750000125, kRel, "norm 2, clip 1");
  expect_rel(clip_scale(1.0, 1.0), 0.9999990000010001, kRel, "norm 1, clip 1: the 1e-6 still clips");
  expect_rel(clip_scale(10.0, 0.5), 0.049999995000000505, kRel, "norm 10, clip 0.5");
  expect_rel(clip_scale(5.0, 3.0), 0.599999880000024, kRel, "norm 5, clip 3");
  expect_rel(clip_scale(1e30, 1.0), 1e-30, kRel, "huge norm");
  // Below the threshold nothing is scaled.
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_scale(0.0, 1.0), 1.0);
  EXPECT_EQ(clip_scale(0.999, 1.0), 1.0);
  EXPECT_EQ(clip_scale(2.9, 3.0), 1.0);
}

TEST(ClipScale, ZeroClipMeansNoClipping) {
  for (double norm : {0.0, 0.5, 1.0, 2.0, 1e6, 1e30}) EXPECT_EQ(clip_scale(norm, 0.0), 1.0) << "norm " << norm;
}

TEST(ClipScale, ScaledGradientHasNormJustBelowClip) {
  // A gradient (3, 4, 12) has norm 13; after scaling by clip_scale its norm is clip·13/(13 + 1e-6).
  const double g[] = {3.0, 4.0, 12.0};
  for (double clip : {0.1, 1.0, 5.0}) {
    const double s = clip_scale(13.0, clip);
    double sum = 0;
    for (double x : g) sum += (x * s) * (x * s);
    const double norm = std::sqrt(sum);
    EXPECT_LT(norm, clip) << "clip " << clip;
    expect_rel(norm, clip * 13.0 / 13.000001, 1e-13, "clip " + std::to_string(clip));
  }
}

}  // namespace test_lr_schedule
}  // namespace meshtrain
