// Dynamic loss scaling for fp16 (as torch.cuda.amp.GradScaler and Megatron do): the loss gradient
// is multiplied by a scale S so that small gradients stay representable in fp16; the gradients are
// divided by S in fp32. A step whose gradients overflowed (an Inf or NaN anywhere) is skipped and
// S halved; after `window` clean steps in a row S doubles. bf16 has fp32's range and needs none (S = 1).
#pragma once

#include <cstdint>

namespace meshtrain {

class LossScaler {
 public:
  // enabled = false: S stays 1 and no step is skipped.
  LossScaler(bool enabled, double initial_scale, std::int64_t window);

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  // Records whether this step's gradients were finite; returns whether the update may be applied.
  bool update(bool finite);
  std::int64_t skipped() const { return skipped_; }
  std::int64_t clean_steps() const { return clean_steps_; }
  // Continues from a checkpoint's state (fp16 only; ignored otherwise).
  void restore(double scale, std::int64_t clean_steps);

 private:
  bool enabled_;
  double scale_;
  std::int64_t window_;
  std::int64_t clean_steps_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace meshtrain
