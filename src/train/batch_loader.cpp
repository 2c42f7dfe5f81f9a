// Micro-batch assembly from windows of the token stream, and its upload.
#include "train/batch_loader.hpp"

#include <atomic>
#include <thread>
#include <type_traits>

namespace meshtrain {
namespace {

// The host's view of the slot's tokens: a pinned staging copy, or the device buffer itself where
// that is host memory (host builds). A template, so that the branch a build does not take is not compiled.
template <class Tokens>
Kokkos::View<int*, PinnedSpace> staging_for(const Tokens& tokens) {
  if constexpr (std::is_same_v<typename Tokens::memory_space, PinnedSpace>) {
    return tokens;
  } else {
    return Kokkos::View<int*, PinnedSpace>("meshtrain::data::staging", tokens.extent(0));
  }
}

}  // namespace

BatchLoader::BatchLoader(const io::TokenStream& stream, DataOrder& order, int micro_batch, int seq_len, int first_micro,
                         const ExecSpace& space)
    : stream_(stream),
      order_(order),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      first_micro_(first_micro),
      space_(space),
      window_("meshtrain::data::window", seq_len + 1),
      marks_("meshtrain::data::marks", slots) {
  for (Slot& s : slots_) {
    s.device = Buffer<int>("meshtrain::data::tokens", 2 * tokens());
    s.staging = staging_for(s.device);
  }
}

void BatchLoader::wait_for_slot(int slot) const {
  std::atomic_ref<std::int64_t> mark(marks_(slot));
  while (mark.load(std::memory_order_acquire) < awaited_[std::size_t(slot)]) std::this_thread::yield();
}

void BatchLoader::load(std::int64_t step, int micro) {
  current_ = (current_ + 1) % slots;
  const Slot& slot = slots_[std::size_t(current_)];
  wait_for_slot(current_);
  const std::size_t T = seq_len_, N = tokens();
  for (int b = 0; b < micro_batch_; ++b) {
    const std::uint64_t w = order_.window(step, (first_micro_ + micro) * micro_batch_ + b);
    stream_.copy(w * T, T + 1, window_.data());
    for (std::size_t t = 0; t < T; ++t) {
      slot.staging(b * T + t) = window_(t);
      slot.staging(N + b * T + t) = window_(t + 1);
    }
  }
  if (slot.staging.data() != slot.device.data()) Kokkos::deep_copy(space_, slot.device, slot.staging);
  // The other slot was last read by what is queued so far: the device marks when that is done,
  // and the load after this one waits for the mark before refilling it.
  const int other = (current_ + 1) % slots;
  const std::int64_t ticket = ++tickets_;
  const Kokkos::View<std::int64_t*, PinnedSpace> marks = marks_;
  Kokkos::parallel_for(
      "meshtrain::data::mark", Kokkos::RangePolicy<ExecSpace>(space_, 0, 1),
      KOKKOS_LAMBDA(int) { marks(other) = ticket; });
  awaited_[std::size_t(other)] = ticket;
}

}  // namespace meshtrain
