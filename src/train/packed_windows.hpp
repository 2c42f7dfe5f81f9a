// Fine-tuning records packed into training windows (share/docs/usage.md, Packing fine-tuning records).
//
// A record of L tokens r_0..r_{L-1} occupies P = L − 1 positions of a window of T = seq_len: inputs
// r_0..r_{L-2}, targets r_1..r_{L-1}. Records of fewer than 2 tokens occupy nothing and are skipped;
// one with P > T keeps its first T positions (data.overlong = truncate) or is left out (drop). Each
// epoch e takes the records in order 0..R−1 (sequential) or in shuffled_windows(R, seed, e)'s order
// (shuffle, the permutation the token stream's windows use) and packs them next-fit: a record goes
// into the current window while it fits, and one that does not fit in what is left closes that
// window (the rest is padding) and starts the next. Windows are numbered in packing order; the
// run's k-th sample (SampleNumbering's k) is the k-th window of epoch 0's windows, then epoch 1's,
// and so on, each epoch packed from its own order. The order depends on the seed alone, so a run
// resumed in the middle of an epoch reads exactly the windows a straight run reads.
#pragma once

#include "core/config.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace meshtrain {

// One record's place in a window: its index in the fine-tuning data and the positions it fills,
// its tokens 0..positions as inputs 0..positions−1 and targets 1..positions.
struct PackedRecord {
  std::uint64_t record;
  std::int32_t positions;
  bool operator==(const PackedRecord&) const = default;
};

// The records of one window in window order, the first at position 0, each right after the one
// before; positions from filled() to T are padding.
struct PackedWindow {
  std::span<const PackedRecord> records;
  std::int64_t filled() const;
};

// One epoch's packing is kept (O(R) memory), and the window counts of the epochs met: asking for a
// sample packs at most the epochs before it that were not counted yet. Not thread-safe.
class PackedWindows {
 public:
  // `record_lengths` holds each record's token count L_r (io::SftShards::record_length). InputError,
  // with the counts and what to change, when no record can be placed (every record shorter than 2
  // tokens, or longer than a window under data.overlong = drop).
  PackedWindows(const std::vector<std::int64_t>& record_lengths, int seq_len, SampleOrder order, std::uint64_t seed,
                OverlongRecords overlong);

  // The `sample`-th window of the run (epochs concatenated). The view stays valid until the next
  // call of window() or windows_in_epoch() that reaches another epoch: one epoch's packing is kept.
  PackedWindow window(std::uint64_t sample);
  // Windows that `epoch` packs into (the same every epoch under sequential, varying under shuffle).
  std::uint64_t windows_in_epoch(std::uint64_t epoch);

  int seq_len() const { return seq_len_; }
  std::uint64_t records() const { return positions_.size(); }
  // Record counts, the same every epoch: those packed (each once an epoch), those kept to their
  // first T positions, those left out for being longer than a window, those of fewer than 2 tokens.
  std::uint64_t usable_records() const { return usable_; }
  std::uint64_t truncated() const { return truncated_; }
  std::uint64_t dropped() const { return dropped_; }
  std::uint64_t skipped_short() const { return skipped_short_; }

 private:
  // One epoch's windows: window w is records[window_starts[w], window_starts[w + 1]).
  struct Packing {
    std::vector<PackedRecord> records;
    std::vector<std::uint64_t> window_starts;
    std::uint64_t windows() const { return window_starts.size() - 1; }
  };
  // The packing of `epoch`, computed unless it is the one kept.
  const Packing& packing(std::uint64_t epoch);
  Packing pack(std::uint64_t epoch) const;
  // The epoch that holds the run's `sample`-th window (shuffle; counts epochs' windows as needed).
  std::uint64_t epoch_of(std::uint64_t sample);

  std::vector<std::int32_t> positions_;  // per record: positions it fills, 0 when it is not packed
  int seq_len_;
  bool shuffle_;
  std::uint64_t seed_;
  std::uint64_t usable_ = 0, truncated_ = 0, dropped_ = 0, skipped_short_ = 0;
  // Under shuffle, the run's windows through the end of each epoch counted so far (epochs 0, 1, ...).
  std::vector<std::uint64_t> epoch_ends_;
  // The packing kept, of the epoch whose record order it is (always 0 under sequential: one order).
  std::uint64_t packed_order_ = ~std::uint64_t(0);
  Packing packed_;
};

}  // namespace meshtrain
