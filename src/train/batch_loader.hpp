// Fills a micro-batch's input and target tokens from the token stream in the data-order contract.
//
// Micro-batch k of a step holds samples j = (first + k)·B … (first + k)·B + B − 1 of that step
// (B = micro_batch); a data-parallel rank d starts at first = d · accum.
// Host staging and device buffers are allocated once; load() allocates nothing.
#pragma once

#include "core/exec.hpp"
#include "io/token_shard.hpp"
#include "train/data_order.hpp"

#include <cstdint>

namespace meshtrain {

class BatchLoader {
 public:
  BatchLoader(const io::TokenStream& stream, DataOrder& order, int micro_batch, int seq_len, int first_micro = 0);

  // Loads micro-batch `micro` of step `step` into inputs() and targets() (B·T tokens each).
  void load(std::int64_t step, int micro);

  CVec<int> inputs() const { return CVec<int>(inputs_.data(), inputs_.extent(0)); }
  CVec<int> targets() const { return CVec<int>(targets_.data(), targets_.extent(0)); }
  // Bytes of its buffers (host mirrors count only where they are separate allocations).
  std::size_t bytes() const { return bytes_for(micro_batch_, seq_len_); }
  static std::size_t bytes_for(int micro_batch, int seq_len) {
    constexpr bool mirrored = !Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
    const std::size_t tokens = std::size_t(micro_batch) * std::size_t(seq_len);
    return sizeof(int) * (std::size_t(seq_len) + 1 + 2 * tokens * (mirrored ? 2 : 1));
  }

 private:
  const io::TokenStream& stream_;
  DataOrder& order_;
  int micro_batch_;
  int seq_len_;
  int first_micro_;
  Kokkos::View<int*, HostSpace> window_;  // T + 1 tokens
  Buffer<int> inputs_;
  Buffer<int> targets_;
  Buffer<int>::HostMirror host_inputs_;
  Buffer<int>::HostMirror host_targets_;
};

}  // namespace meshtrain
