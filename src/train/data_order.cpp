// Data order: sequential windows, or per-epoch seeded permutations of them.
#include "train/data_order.hpp"

#include "core/errors.hpp"

#include <Random123/philox.h>

#include <numeric>
#include <stdexcept>

namespace meshtrain {

DataOrder::DataOrder(std::uint64_t tokens, int seq_len, int global_batch, SampleOrder order, std::uint64_t seed)
    : windows_(tokens == 0 ? 0 : (tokens - 1) / std::uint64_t(seq_len)),
      numbering_(global_batch),
      shuffle_(order == SampleOrder::shuffle),
      seed_(seed) {
  if (windows_ == 0) {
    input_error("data.train holds {} tokens, fewer than model.seq_len + 1 = {}: no training window fits", tokens,
                seq_len + 1);
  }
}

std::uint64_t DataOrder::window(std::int64_t step, int sample) {
  if (windows_ == 0) throw std::logic_error("DataOrder::window on an order of samples without windows");
  const std::uint64_t index = sample_index(step, sample);
  if (!shuffle_) return index % windows_;
  return permutation(index / windows_)[index % windows_];
}

const std::vector<std::uint64_t>& DataOrder::permutation(std::uint64_t epoch) {
  if (epoch != cached_epoch_) {
    cached_permutation_ = shuffled_windows(windows_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  return cached_permutation_;
}

std::vector<std::uint64_t> shuffled_windows(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::uint64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  using Philox = r123::Philox4x32;
  Philox generator;
  // A stream of its own: the third counter word tells shuffling draws from initialisation draws.
  const Philox::key_type key = {{std::uint32_t(seed), std::uint32_t(seed >> 32)}};
  for (std::uint64_t i = n; i > 1; --i) {
    const Philox::ctr_type counter = {
        {std::uint32_t(i), std::uint32_t(i >> 32), std::uint32_t(epoch), 0x5348u /* "SH" */}};
    const Philox::ctr_type bits = generator(counter, key);
    const std::uint64_t r = (std::uint64_t(bits[0]) << 32) | bits[1];
    // Multiply-shift maps r onto [0, i) without the modulo's bias towards small values.
    const std::uint64_t j = std::uint64_t((__uint128_t(r) * i) >> 64);
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

}  // namespace meshtrain
