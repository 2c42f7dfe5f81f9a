// Micro-batch assembly from windows of the token stream, and its upload.
#include "train/batch_loader.hpp"

#include "kernels/cross_entropy.hpp"

#include <algorithm>
#include <atomic>
#include <span>
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
                         const ExecSpace& space, const ContextChunks& chunks)
    : BatchLoader(&stream, nullptr, order, micro_batch, seq_len, first_micro, space, chunks) {}

BatchLoader::BatchLoader(TrainingData& data, int micro_batch, int seq_len, int first_micro, const ExecSpace& space,
                         const ContextChunks& chunks)
    : BatchLoader(data.packed() ? nullptr : &data.stream(), &data, data.order(), micro_batch, seq_len, first_micro,
                  space, chunks) {}

BatchLoader::BatchLoader(const io::TokenStream* stream, TrainingData* data, DataOrder& order, int micro_batch,
                         int seq_len, int first_micro, const ExecSpace& space, const ContextChunks& chunks)
    : stream_(stream),
      data_(data),
      order_(order),
      micro_batch_(micro_batch),
      seq_len_(seq_len),
      first_micro_(first_micro),
      space_(space),
      chunks_(chunks),
      window_("meshtrain::data::window", seq_len + 1),
      marks_("meshtrain::data::marks", slots) {
  for (Slot& s : slots_) {
    s.device = Buffer<int>("meshtrain::data::tokens", slot_elements(micro_batch, seq_len, packed()));
    s.staging = staging_for(s.device);
  }
  if (!packed()) return;
  std::size_t longest = 0;
  for (std::size_t r = 0; r < data->records().record_count(); ++r) {
    longest = std::max(longest, data->records().record_length(r));
  }
  record_tokens_.resize(longest);
  record_mask_.resize(longest);
  ends_.resize(std::size_t(micro_batch));
  for (std::vector<int>& e : ends_) e.reserve(std::size_t(seq_len) + 1);
}

void BatchLoader::wait_for_slot(int slot) const {
  std::atomic_ref<std::int64_t> mark(marks_(slot));
  while (mark.load(std::memory_order_acquire) < awaited_[std::size_t(slot)]) std::this_thread::yield();
}

int BatchLoader::fill_plain(const Slot& slot, std::int64_t step, int micro) {
  const std::size_t T = seq_len_, N = whole_tokens();
  for (int b = 0; b < micro_batch_; ++b) {
    const int sample = (first_micro_ + micro) * micro_batch_ + b;
    if (order_.sample_index(step, sample) >= sample_limit_) {
      for (std::size_t t = 0; t < T; ++t) {
        slot.staging(b * T + t) = 0;
        slot.staging(N + b * T + t) = kNoLossTarget;
      }
      continue;
    }
    const std::uint64_t w = order_.window(step, sample);
    stream_->copy(w * T, T + 1, window_.data());
    for (std::size_t t = 0; t < T; ++t) {
      slot.staging(b * T + t) = window_(t);
      slot.staging(N + b * T + t) = window_(t + 1);
    }
  }
  return 0;
}

// Each record of L tokens takes P = min(L − 1, T) positions: inputs r_0 … r_{P−1}, targets r_1 … r_P,
// a target kNoLossTarget where its mask is 0. The positions past the last record are padding (input
// 0, no loss), a document of their own so that nothing of it reaches a record.
int BatchLoader::fill_packed(const Slot& slot, std::int64_t step, int micro) {
  const std::size_t T = seq_len_, N = whole_tokens();
  const io::SftShards& records = data_->records();
  int docs = 1;
  for (int b = 0; b < micro_batch_; ++b) {
    const std::uint64_t sample = order_.sample_index(step, (first_micro_ + micro) * micro_batch_ + b);
    std::vector<int>& ends = ends_[std::size_t(b)];
    ends.clear();
    std::size_t t = b * T;
    // A row past the sample limit is all padding.
    const std::span<const PackedRecord> packed =
        sample < sample_limit_ ? data_->window(sample).records : std::span<const PackedRecord>();
    for (const PackedRecord& r : packed) {
      records.copy_record(r.record, record_tokens_.data(), record_mask_.data());
      for (std::int32_t i = 0; i < r.positions; ++i, ++t) {
        slot.staging(t) = record_tokens_[std::size_t(i)];
        slot.staging(N + t) = record_mask_[std::size_t(i) + 1] ? record_tokens_[std::size_t(i) + 1] : kNoLossTarget;
      }
      ends.push_back(int(t - b * T));
    }
    for (; t < (b + 1) * T; ++t) {
      slot.staging(t) = 0;
      slot.staging(N + t) = kNoLossTarget;
    }
    if (ends.empty() || ends.back() < int(T)) ends.push_back(int(T));
    docs = std::max(docs, int(ends.size()));
  }
  // Offsets 0, the ends, then T again for the documents a sequence lacks (kernels/attention_segments.hpp).
  for (int b = 0; b < micro_batch_; ++b) {
    const std::vector<int>& ends = ends_[std::size_t(b)];
    const std::size_t base = 2 * N + std::size_t(b) * std::size_t(docs + 1);  // after the whole sequences' tokens
    slot.staging(base) = 0;
    for (int d = 0; d < docs; ++d) {
      slot.staging(base + 1 + std::size_t(d)) = d < int(ends.size()) ? ends[std::size_t(d)] : int(T);
    }
  }
  return docs;
}

void BatchLoader::keep_local_rows(const Slot& slot) const {
  const std::size_t T = seq_len_, N = whole_tokens(), Tl = std::size_t(chunks_.local_rows()), Nl = tokens();
  // Row (b, r) moves from b·T + position(r) ≥ b·Tl + r: positions grow with r, so every read is ahead of
  // every write so far. The targets, after the inputs, read past the inputs' new end.
  for (const auto& [from, to] : {std::pair{std::size_t(0), std::size_t(0)}, std::pair{N, Nl}}) {
    for (std::size_t b = 0; b < std::size_t(micro_batch_); ++b) {
      for (std::size_t r = 0; r < Tl; ++r) {
        slot.staging(to + b * Tl + r) = slot.staging(from + b * T + std::size_t(chunks_.position(int(r))));
      }
    }
  }
}

void BatchLoader::load(std::int64_t step, int micro) {
  current_ = (current_ + 1) % slots;
  Slot& slot = slots_[std::size_t(current_)];
  wait_for_slot(current_);
  slot.docs = packed() ? fill_packed(slot, step, micro) : fill_plain(slot, step, micro);
  if (chunks_.split()) keep_local_rows(slot);
  step_ = step;
  micro_ = micro;
  if (slot.staging.data() != slot.device.data()) {
    // Only what this load filled: the offsets of `docs` documents per sequence.
    const std::size_t used = 2 * whole_tokens() + attention_segments_size(micro_batch_, slot.docs);
    Kokkos::deep_copy(space_, Kokkos::subview(slot.device, std::make_pair(std::size_t(0), used)),
                      Kokkos::subview(slot.staging, std::make_pair(std::size_t(0), used)));
  }
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
