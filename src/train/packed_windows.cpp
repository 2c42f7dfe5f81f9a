// Next-fit packing of fine-tuning records into windows, epoch by epoch, in the data order.
#include "train/packed_windows.hpp"

#include "core/errors.hpp"
#include "train/data_order.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace meshtrain {

std::int64_t PackedWindow::filled() const {
  std::int64_t sum = 0;
  for (const PackedRecord& r : records) sum += r.positions;
  return sum;
}

PackedWindows::PackedWindows(const std::vector<std::int64_t>& record_lengths, int seq_len, SampleOrder order,
                             std::uint64_t seed, OverlongRecords overlong)
    : positions_(record_lengths.size()), seq_len_(seq_len), shuffle_(order == SampleOrder::shuffle), seed_(seed) {
  if (seq_len <= 0) throw std::invalid_argument("PackedWindows: seq_len must be positive");
  // The shortest record left out, for the error below: the seq_len that would have taken it.
  std::int64_t shortest_dropped = std::numeric_limits<std::int64_t>::max();
  for (std::size_t r = 0; r < record_lengths.size(); ++r) {
    const std::int64_t length = record_lengths[r];
    if (length < 0) throw std::invalid_argument("PackedWindows: a record length is negative");
    const std::int64_t positions = length - 1;
    if (positions < 1) {
      ++skipped_short_;
    } else if (positions <= seq_len) {
      positions_[r] = std::int32_t(positions);
    } else if (overlong == OverlongRecords::truncate) {
      positions_[r] = seq_len;
      ++truncated_;
    } else {
      ++dropped_;
      shortest_dropped = std::min(shortest_dropped, positions);
    }
  }
  usable_ = records() - skipped_short_ - dropped_;
  if (usable_ > 0) return;
  if (records() == 0) input_error("the fine-tuning data holds no records: nothing to train on");
  if (dropped_ == 0) {
    input_error(
        "no fine-tuning record fits a window: all {} records have fewer than 2 tokens, nothing to predict; "
        "every record needs 2 tokens or more: prepare the data again",
        records());
  }
  input_error(
      "no fine-tuning record fits a window: of {} records, {} are longer than model.seq_len + 1 = {} tokens and "
      "dropped (data.overlong = drop), {} have fewer than 2 tokens; set data.overlong = truncate to keep each one's "
      "first {} tokens, or model.seq_len = {} or more to take the shortest of them whole",
      records(), dropped_, std::int64_t(seq_len) + 1, skipped_short_, std::int64_t(seq_len) + 1, shortest_dropped);
}

PackedWindows::Packing PackedWindows::pack(std::uint64_t epoch) const {
  const std::vector<std::uint64_t> order =
      shuffle_ ? shuffled_windows(records(), seed_, epoch) : std::vector<std::uint64_t>{};
  Packing p;
  p.records.reserve(usable_);
  p.window_starts.push_back(0);
  std::int64_t filled = 0;  // positions taken in the current window
  for (std::uint64_t i = 0; i < records(); ++i) {
    const std::uint64_t r = shuffle_ ? order[i] : i;
    const std::int32_t positions = positions_[r];
    if (positions == 0) continue;
    // Next fit: what does not fit in the rest of this window closes it and starts the next. The first
    // record always fits, so no window is empty.
    if (filled + positions > seq_len_) {
      p.window_starts.push_back(p.records.size());
      filled = 0;
    }
    p.records.push_back({r, positions});
    filled += positions;
  }
  p.window_starts.push_back(p.records.size());
  return p;
}

const PackedWindows::Packing& PackedWindows::packing(std::uint64_t epoch) {
  const std::uint64_t order = shuffle_ ? epoch : 0;
  if (order != packed_order_) {
    packed_ = pack(order);
    packed_order_ = order;
  }
  return packed_;
}

std::uint64_t PackedWindows::epoch_of(std::uint64_t sample) {
  while (epoch_ends_.empty() || epoch_ends_.back() <= sample) {
    const std::uint64_t before = epoch_ends_.empty() ? 0 : epoch_ends_.back();
    epoch_ends_.push_back(before + packing(epoch_ends_.size()).windows());
  }
  return std::uint64_t(std::upper_bound(epoch_ends_.begin(), epoch_ends_.end(), sample) - epoch_ends_.begin());
}

std::uint64_t PackedWindows::windows_in_epoch(std::uint64_t epoch) {
  if (shuffle_ && epoch < epoch_ends_.size()) return epoch_ends_[epoch] - (epoch == 0 ? 0 : epoch_ends_[epoch - 1]);
  return packing(epoch).windows();
}

PackedWindow PackedWindows::window(std::uint64_t sample) {
  std::uint64_t epoch = 0, first = 0;  // the epoch holding the sample and the run's index of its first window
  if (shuffle_) {
    epoch = epoch_of(sample);
    first = epoch == 0 ? 0 : epoch_ends_[epoch - 1];
  } else {
    // Sequential: one packing, repeated every epoch.
    first = sample - sample % packing(0).windows();
  }
  const Packing& p = packing(epoch);
  const std::uint64_t w = sample - first;
  return {std::span<const PackedRecord>(p.records.data() + p.window_starts[w],
                                        p.window_starts[w + 1] - p.window_starts[w])};
}

}  // namespace meshtrain
