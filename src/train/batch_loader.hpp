// Fills a micro-batch's input and target tokens from the token stream in the data-order contract.
//
// Micro-batch k of a step holds samples j = (first + k)·B … (first + k)·B + B − 1 of that step
// (B = micro_batch); a data-parallel rank d starts at first = d · accum.
//
// Uploaded without a global fence: each load fills host staging in pinned memory (core/exec.hpp
// PinnedSpace) and copies it with deep_copy on the execution space, so the host goes on while the
// device works. Two slots take turns, each its own staging and device buffer: a load refills its
// slot only once the device has finished what was queued before the previous load — the kernels
// that read that slot's tokens and its copy — which it learns from a mark the device writes to
// pinned memory, not from a fence. On host builds the staging is the device buffer itself.
// Host staging and device buffers are allocated once; load() allocates nothing.
#pragma once

#include "core/exec.hpp"
#include "io/token_shard.hpp"
#include "train/data_order.hpp"

#include <array>
#include <cstdint>
#include <type_traits>

namespace meshtrain {

class BatchLoader {
 public:
  BatchLoader(const io::TokenStream& stream, DataOrder& order, int micro_batch, int seq_len, int first_micro = 0,
              const ExecSpace& space = ExecSpace());

  // Loads micro-batch `micro` of step `step` into inputs() and targets() (B·T tokens each), which
  // hold it until the next load but one.
  void load(std::int64_t step, int micro);

  CVec<int> inputs() const { return CVec<int>(slots_[current_].device.data(), tokens()); }
  CVec<int> targets() const { return CVec<int>(slots_[current_].device.data() + tokens(), tokens()); }
  // Bytes of its buffers (host staging counts only where it is a separate allocation).
  std::size_t bytes() const { return bytes_for(micro_batch_, seq_len_); }
  static std::size_t bytes_for(int micro_batch, int seq_len) {
    constexpr bool mirrored = !std::is_same_v<MemSpace, PinnedSpace>;
    const std::size_t n = std::size_t(micro_batch) * std::size_t(seq_len);
    return sizeof(int) * (std::size_t(seq_len) + 1) + slots * 2 * n * sizeof(int) * (mirrored ? 2 : 1) +
           slots * sizeof(std::int64_t);
  }

 private:
  static constexpr int slots = 2;
  struct Slot {
    Buffer<int> device;                       // (2·B·T): inputs, then targets
    Kokkos::View<int*, PinnedSpace> staging;  // the same on host builds (no allocation of its own)
  };
  std::size_t tokens() const { return std::size_t(micro_batch_) * std::size_t(seq_len_); }
  void wait_for_slot(int slot) const;

  const io::TokenStream& stream_;
  DataOrder& order_;
  int micro_batch_;
  int seq_len_;
  int first_micro_;
  ExecSpace space_;
  Kokkos::View<int*, HostSpace> window_;  // T + 1 tokens
  std::array<Slot, slots> slots_;
  int current_ = slots - 1;  // the slot the last load filled
  // marks_(s) reaches awaited_[s] once the device is done with slot s's last use.
  Kokkos::View<std::int64_t*, PinnedSpace> marks_;
  std::array<std::int64_t, slots> awaited_{};
  std::int64_t tickets_ = 0;
};

}  // namespace meshtrain
