// Dynamic loss scaling.
#include "state/loss_scaler.hpp"

#include <algorithm>

namespace meshtrain {

LossScaler::LossScaler(bool enabled, double initial_scale, std::int64_t window)
    : enabled_(enabled), scale_(enabled ? initial_scale : 1.0), window_(window) {}

void LossScaler::restore(double scale, std::int64_t clean_steps) {
  if (!enabled_) return;
  scale_ = scale;
  clean_steps_ = clean_steps;
}

bool LossScaler::update(bool finite) {
  if (!enabled_) return true;
  if (!finite) {
    // Back off; a scale below 1 would only push small gradients into fp16's subnormals.
    scale_ = std::max(1.0, scale_ / 2);
    clean_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_steps_ == window_) {
    scale_ *= 2;
    clean_steps_ = 0;
  }
  return true;
}

}  // namespace meshtrain
