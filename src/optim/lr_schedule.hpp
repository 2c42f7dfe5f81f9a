// Learning-rate schedule (share/docs/usage.md, Model and optimizer): linear warm-up, then constant or cosine decay.
#pragma once

#include "core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace meshtrain {

// The rate of update i (0-based) of `steps` in total.
inline double learning_rate(const OptimConfig& o, std::int64_t steps, std::int64_t i) {
  if (i < o.warmup_steps) return o.lr * double(i + 1) / double(o.warmup_steps);
  if (o.decay == LrDecay::constant) return o.lr;
  const double p = double(i - o.warmup_steps) / double(std::max<std::int64_t>(1, steps - o.warmup_steps));
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(std::numbers::pi * p));
}

// Factor every gradient is multiplied by: min(1, clip / (norm + 1e-6)), or 1 when clipping is off.
inline double clip_scale(double grad_norm, double grad_clip) {
  if (grad_clip <= 0) return 1.0;
  return std::min(1.0, grad_clip / (grad_norm + 1e-6));
}

}  // namespace meshtrain
