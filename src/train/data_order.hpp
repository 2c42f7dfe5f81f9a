// Which window of the token stream each sample of each step reads (share/docs/usage.md, Data order).
//
// With N tokens, T = seq_len and G = global_batch there are W = floor((N − 1) / T) windows; window
// w covers tokens [wT, wT + T] (inputs the first T, targets the last T). Sample j of step s is the
// i-th sample of the run, i = s·G + j (train/sample_numbering.hpp: after a resume with another
// global batch, S0 + (s − s0)·G + j). `sequential` reads window i mod W; `shuffle` reads the same
// position of a seeded permutation of the windows, a fresh permutation each epoch. Both depend on
// the step alone, so a resumed run and any layout read exactly the same data.
#pragma once

#include "core/config.hpp"
#include "train/sample_numbering.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

class DataOrder {
 public:
  DataOrder(std::uint64_t tokens, int seq_len, int global_batch, SampleOrder order, std::uint64_t seed);
  // The sample numbering alone, for data whose windows another order makes (fine-tuning records,
  // packed by train/packed_windows): sample_index() and the resume position, no window().
  static DataOrder of_samples(int global_batch) { return DataOrder(global_batch); }

  std::uint64_t windows() const { return windows_; }
  // Steps from `step` on continue after `samples` samples (a checkpoint's position).
  void continue_from(std::int64_t step, std::uint64_t samples) { numbering_.continue_from(step, samples); }
  // The run's index of sample j (0 ≤ j < G) of step s (0-based), SampleNumbering's rule.
  std::uint64_t sample_index(std::int64_t step, int sample) const { return numbering_.index(step, sample); }
  // Window read by sample j (0 ≤ j < G) of step s (0-based).
  std::uint64_t window(std::int64_t step, int sample);

 private:
  explicit DataOrder(int global_batch) : windows_(0), numbering_(global_batch), shuffle_(false), seed_(0) {}
  const std::vector<std::uint64_t>& permutation(std::uint64_t epoch);

  std::uint64_t windows_;
  SampleNumbering numbering_;
  bool shuffle_;
  std::uint64_t seed_;
  std::uint64_t cached_epoch_ = ~std::uint64_t(0);
  std::vector<std::uint64_t> cached_permutation_;
};

// The seeded permutation of [0, n) used for `epoch` (Fisher–Yates driven by Philox).
std::vector<std::uint64_t> shuffled_windows(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch);

}  // namespace meshtrain
