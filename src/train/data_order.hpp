// Which window of the token stream each sample of each step reads (share/docs/usage.md, Data order).
//
// With N tokens, T = seq_len and G = global_batch there are W = floor((N − 1) / T) windows; window
// w covers tokens [wT, wT + T] (inputs the first T, targets the last T). Sample j of step s is the
// (s·G + j)-th sample of the run. `sequential` reads window (s·G + j) mod W; `shuffle` reads the
// same position of a seeded permutation of the windows, a fresh permutation each epoch. Both depend
// on the step alone, so a resumed run and any layout read exactly the same data.
//
// A job resumed with another global batch continues from the sample count the checkpoint holds
// (Megatron's consumed samples): from step s0 with S0 samples seen, sample j of step s is the
// (S0 + (s − s0)·G + j)-th. With an unchanged batch S0 = s0·G and nothing changes.
#pragma once

#include "core/config.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

class DataOrder {
 public:
  DataOrder(std::uint64_t tokens, int seq_len, int global_batch, SampleOrder order, std::uint64_t seed);
  // The sample count alone, for data whose windows another order makes (fine-tuning records, packed
  // by train/packed_windows): sample_index() and the resume position, no window().
  static DataOrder of_samples(int global_batch);

  std::uint64_t windows() const { return windows_; }
  // Steps from `step` on continue after `samples` samples (a checkpoint's position).
  void continue_from(std::int64_t step, std::uint64_t samples) {
    first_step_ = step;
    first_sample_ = samples;
  }
  // The run's sample index of sample j (0 ≤ j < G) of step s (0-based).
  std::uint64_t sample_index(std::int64_t step, int sample) const {
    return first_sample_ + std::uint64_t(step - first_step_) * std::uint64_t(global_batch_) + std::uint64_t(sample);
  }
  // Window read by sample j (0 ≤ j < G) of step s (0-based).
  std::uint64_t window(std::int64_t step, int sample);

 private:
  DataOrder() = default;
  const std::vector<std::uint64_t>& permutation(std::uint64_t epoch);

  std::uint64_t windows_ = 0;
  int global_batch_ = 0;
  bool shuffle_ = false;
  std::uint64_t seed_ = 0;
  std::int64_t first_step_ = 0;
  std::uint64_t first_sample_ = 0;
  std::uint64_t cached_epoch_ = ~std::uint64_t(0);
  std::vector<std::uint64_t> cached_permutation_;
};

// The seeded permutation of [0, n) used for `epoch` (Fisher–Yates driven by Philox).
std::vector<std::uint64_t> shuffled_windows(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch);

}  // namespace meshtrain
