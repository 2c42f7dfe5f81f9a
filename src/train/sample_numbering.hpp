// Which sample of the run each sample of each step is (share/docs/usage.md, Data order): the one
// rule that both the token stream's windows (train/data_order.hpp) and packed fine-tuning windows
// (train/packed_windows.hpp) are indexed by.
//
// Sample j (0 ≤ j < G) of step s is the (s·G + j)-th sample of the run. A job resumed with another
// global batch continues from the sample count its checkpoint holds (Megatron's consumed samples):
// from step s0 with S0 samples seen, sample j of step s is the (S0 + (s − s0)·G + j)-th. With an
// unchanged batch S0 = s0·G and the two agree.
#pragma once

#include <cstdint>

namespace meshtrain {

class SampleNumbering {
 public:
  explicit SampleNumbering(int global_batch) : global_batch_(global_batch) {}

  // Steps from `step` on continue after `samples` samples (a checkpoint's position).
  void continue_from(std::int64_t step, std::uint64_t samples) {
    first_step_ = step;
    first_sample_ = samples;
  }
  // The run's index of sample j (0 ≤ j < G) of step s (0-based): S0 + (s − s0)·G + j.
  std::uint64_t index(std::int64_t step, int sample) const {
    return first_sample_ + std::uint64_t(step - first_step_) * std::uint64_t(global_batch_) + std::uint64_t(sample);
  }

 private:
  int global_batch_;
  std::int64_t first_step_ = 0;
  std::uint64_t first_sample_ = 0;
};

}  // namespace meshtrain
