// Packed fine-tuning windows (share/docs/usage.md, Packing fine-tuning records): which records each
// sample's window holds.
//
// Small cases against windows worked out by hand (sequential order, truncate against drop, records
// too short, a record of exactly T positions, a window filled exactly); random lengths against the
// properties that together define next-fit packing in the data order — each epoch lists every
// usable record once, in the order 0..R−1 or shuffled_windows(R, seed, e), with its positions
// worked out here from its length; no window holds more than T positions or none; a window closes
// only when the next record does not fit — and a resume property: a fresh object asked for sample
// k returns what one that walked 0..k returned.
#include "core/errors.hpp"
#include "train/data_order.hpp"
#include "train/packed_windows.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace meshtrain {
namespace test_packed_windows {

using u64 = std::uint64_t;
using Window = std::vector<PackedRecord>;

Window copy(const PackedWindow& w) { return Window(w.records.begin(), w.records.end()); }

// The run's windows 0..count−1, asked in order of one object.
std::vector<Window> walk(PackedWindows& packed, u64 count) {
  std::vector<Window> out;
  for (u64 k = 0; k < count; ++k) out.push_back(copy(packed.window(k)));
  return out;
}

// ---------------------------------------------------------------------------------------------
// By hand. T = 8; lengths L and positions P = L − 1:
//   r:  0  1  2  3  4   5  6   7  8
//   L:  5  4  9  1  3  10  2  12  0
//   P:  4  3  8  –  2   9  1  11  –     (r3, r8: fewer than 2 tokens; r5, r7: longer than T)

const std::vector<std::int64_t> kLengths = {5, 4, 9, 1, 3, 10, 2, 12, 0};

TEST(PackedWindowsByHand, TruncateKeepsTheFirstTPositions) {
  PackedWindows packed(kLengths, 8, SampleOrder::sequential, 1, OverlongRecords::truncate);
  // r0 + r1 = 7, r2 (8, exactly T: whole) does not fit; r2 fills its window; r4 (2) + r5 (8) do
  // not fit together, nor r5 + r6, nor r6 + r7 (8).
  const std::vector<Window> expected = {
      {{0, 4}, {1, 3}}, {{2, 8}}, {{4, 2}}, {{5, 8}}, {{6, 1}}, {{7, 8}},
  };
  EXPECT_EQ(packed.windows_in_epoch(0), 6u);
  EXPECT_EQ(packed.windows_in_epoch(5), 6u);
  // Three epochs: sequential order packs every epoch alike.
  const std::vector<Window> run = walk(packed, 18);
  for (u64 k = 0; k < run.size(); ++k) EXPECT_EQ(run[k], expected[k % 6]) << "sample " << k;
  EXPECT_EQ(packed.window(0).filled(), 7);
  EXPECT_EQ(packed.window(2).filled(), 2);
  EXPECT_EQ(packed.records(), 9u);
  EXPECT_EQ(packed.usable_records(), 7u);
  EXPECT_EQ(packed.truncated(), 2u);
  EXPECT_EQ(packed.dropped(), 0u);
  EXPECT_EQ(packed.skipped_short(), 2u);
  EXPECT_EQ(packed.seq_len(), 8);
}

TEST(PackedWindowsByHand, DropLeavesOverlongRecordsOut) {
  PackedWindows packed(kLengths, 8, SampleOrder::sequential, 1, OverlongRecords::drop);
  // r0 + r1 = 7; r2 = 8; r4 + r6 = 3 (r5 and r7 gone).
  const std::vector<Window> expected = {{{0, 4}, {1, 3}}, {{2, 8}}, {{4, 2}, {6, 1}}};
  EXPECT_EQ(packed.windows_in_epoch(0), 3u);
  const std::vector<Window> run = walk(packed, 7);
  for (u64 k = 0; k < run.size(); ++k) EXPECT_EQ(run[k], expected[k % 3]) << "sample " << k;
  EXPECT_EQ(packed.usable_records(), 5u);
  EXPECT_EQ(packed.truncated(), 0u);
  EXPECT_EQ(packed.dropped(), 2u);
  EXPECT_EQ(packed.skipped_short(), 2u);
  // Straight to sample 7 = epoch 2's window 1.
  PackedWindows fresh(kLengths, 8, SampleOrder::sequential, 1, OverlongRecords::drop);
  EXPECT_EQ(copy(fresh.window(7)), expected[1]);
}

TEST(PackedWindowsByHand, ARecordThatFillsWhatIsLeftStaysInTheWindow) {
  // T = 6: 3 + 3 = 6 fits exactly; 2 + 4 too; then 5 opens a window, 2 does not fit after it.
  PackedWindows packed({4, 4, 3, 5, 6, 3}, 6, SampleOrder::sequential, 9, OverlongRecords::truncate);
  const std::vector<Window> expected = {{{0, 3}, {1, 3}}, {{2, 2}, {3, 4}}, {{4, 5}}, {{5, 2}}};
  EXPECT_EQ(walk(packed, 4), expected);
  EXPECT_EQ(packed.truncated(), 0u);
}

TEST(PackedWindowsByHand, OneTokenWindows) {
  // T = 1: each record of 2 tokens or more fills one window; longer ones keep tokens 0 and 1.
  PackedWindows packed({2, 1, 7, 3}, 1, SampleOrder::sequential, 1, OverlongRecords::truncate);
  EXPECT_EQ(walk(packed, 3), (std::vector<Window>{{{0, 1}}, {{2, 1}}, {{3, 1}}}));
  EXPECT_EQ(packed.truncated(), 2u);
  EXPECT_EQ(packed.skipped_short(), 1u);
}

TEST(PackedWindowsByHand, LengthsPastThirtyTwoBits) {
  // A record of 5·10^9 tokens keeps T = 16 positions; under drop it is counted and left out.
  const std::vector<std::int64_t> lengths = {5'000'000'000ll, 9};
  PackedWindows truncated(lengths, 16, SampleOrder::sequential, 1, OverlongRecords::truncate);
  EXPECT_EQ(walk(truncated, 2), (std::vector<Window>{{{0, 16}}, {{1, 8}}}));
  PackedWindows dropped(lengths, 16, SampleOrder::sequential, 1, OverlongRecords::drop);
  EXPECT_EQ(walk(dropped, 2), (std::vector<Window>{{{1, 8}}, {{1, 8}}}));
  EXPECT_EQ(dropped.dropped(), 1u);
}

std::string error_of(const std::vector<std::int64_t>& lengths, int seq_len, OverlongRecords overlong) {
  try {
    PackedWindows(lengths, seq_len, SampleOrder::shuffle, 1, overlong);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(PackedWindowsByHand, NothingToPlaceIsAnInputErrorSayingWhatToChange) {
  EXPECT_EQ(error_of({1, 0, 1}, 8, OverlongRecords::truncate),
            "no fine-tuning record fits a window: all 3 records have fewer than 2 tokens, nothing to predict; every "
            "record needs 2 tokens or more: prepare the data again");
  EXPECT_EQ(error_of({12, 1, 30, 10}, 8, OverlongRecords::drop),
            "no fine-tuning record fits a window: of 4 records, 3 are longer than model.seq_len + 1 = 9 tokens and "
            "dropped (data.overlong = drop), 1 have fewer than 2 tokens; set data.overlong = truncate to keep each "
            "one's first 9 tokens, or model.seq_len = 9 or more to take the shortest of them whole");
  EXPECT_EQ(error_of({}, 8, OverlongRecords::truncate), "the fine-tuning data holds no records: nothing to train on");
  // One record that fits is enough, and truncate places every record of 2 tokens or more.
  EXPECT_EQ(error_of({12, 1, 30, 9}, 8, OverlongRecords::drop), "no error");
  EXPECT_EQ(error_of({12, 1, 30, 10}, 8, OverlongRecords::truncate), "no error");
}

// ---------------------------------------------------------------------------------------------
// Properties on random lengths.

struct Dataset {
  std::vector<std::int64_t> lengths;
  int seq_len;
};

// R records of 0 to 2T + 3 tokens: short, fitting, exactly T positions and overlong ones all occur.
Dataset random_dataset(std::mt19937_64& rng, u64 records, int seq_len) {
  std::uniform_int_distribution<std::int64_t> length(0, 2 * std::int64_t(seq_len) + 3);
  Dataset d{{}, seq_len};
  for (u64 r = 0; r < records; ++r) d.lengths.push_back(length(rng));
  return d;
}

// Positions record r fills, from the definition: L − 1, at most T under truncate; 0: not placed.
std::int32_t expected_positions(std::int64_t length, int seq_len, OverlongRecords overlong) {
  const std::int64_t p = length - 1;
  if (p < 1) return 0;
  if (p <= seq_len) return std::int32_t(p);
  return overlong == OverlongRecords::truncate ? seq_len : 0;
}

// The records epoch e lists, in order, with their positions.
Window expected_epoch(const Dataset& d, SampleOrder order, u64 seed, OverlongRecords overlong, u64 epoch) {
  std::vector<u64> indices(d.lengths.size());
  std::iota(indices.begin(), indices.end(), 0);
  if (order == SampleOrder::shuffle) indices = shuffled_windows(d.lengths.size(), seed, epoch);
  Window out;
  for (u64 r : indices) {
    const std::int32_t p = expected_positions(d.lengths[r], d.seq_len, overlong);
    if (p > 0) out.push_back({r, p});
  }
  return out;
}

std::int64_t filled(const Window& w) {
  std::int64_t sum = 0;
  for (const PackedRecord& r : w) sum += r.positions;
  return sum;
}

TEST(PackedWindowsProperties, EpochsAreNextFitPackingsOfTheDataOrder) {
  std::mt19937_64 rng(2026);
  int cases = 0;
  for (const int T : {1, 4, 16, 50}) {
    for (const u64 R : {1ull, 2ull, 7ull, 100ull, 1000ull}) {
      const Dataset d = random_dataset(rng, R, T);
      for (const SampleOrder order : {SampleOrder::sequential, SampleOrder::shuffle}) {
        for (const OverlongRecords overlong : {OverlongRecords::truncate, OverlongRecords::drop}) {
          const u64 seed = rng();
          const Window epoch0 = expected_epoch(d, order, seed, overlong, 0);
          if (epoch0.empty()) {
            EXPECT_THROW(PackedWindows(d.lengths, T, order, seed, overlong), InputError);
            continue;
          }
          ++cases;
          PackedWindows packed(d.lengths, T, order, seed, overlong);
          EXPECT_EQ(packed.usable_records(), epoch0.size());
          const std::string where =
              fmt::format("T = {}, R = {}, {}, {}, seed {}", T, R, name_of(order), name_of(overlong), seed);
          u64 sample = 0;
          for (u64 epoch = 0; epoch < 4; ++epoch) {
            const u64 windows = packed.windows_in_epoch(epoch);
            Window listed;
            Window previous;
            for (u64 w = 0; w < windows; ++w, ++sample) {
              const Window window = copy(packed.window(sample));
              ASSERT_FALSE(window.empty()) << where << ", epoch " << epoch << " window " << w;
              ASSERT_LE(filled(window), T) << where << ", epoch " << epoch << " window " << w;
              EXPECT_EQ(packed.window(sample).filled(), filled(window));
              // The window before closed only because this one's first record did not fit in it.
              if (w > 0) {
                ASSERT_GT(filled(previous) + window.front().positions, T)
                    << where << ", epoch " << epoch << " window " << w;
              }
              listed.insert(listed.end(), window.begin(), window.end());
              previous = window;
            }
            // Every usable record once, in the epoch's order, with its positions.
            ASSERT_EQ(listed, expected_epoch(d, order, seed, overlong, epoch)) << where << ", epoch " << epoch;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 60);
}

TEST(PackedWindowsProperties, ShuffledEpochsDifferAndFollowTheSeed) {
  std::mt19937_64 rng(7);
  const Dataset d = random_dataset(rng, 200, 16);
  PackedWindows a(d.lengths, 16, SampleOrder::shuffle, 42, OverlongRecords::truncate);
  PackedWindows b(d.lengths, 16, SampleOrder::shuffle, 42, OverlongRecords::truncate);
  PackedWindows c(d.lengths, 16, SampleOrder::shuffle, 43, OverlongRecords::truncate);
  const u64 first_epoch = a.windows_in_epoch(0);
  const std::vector<Window> wa = walk(a, 2 * first_epoch);
  EXPECT_EQ(wa, walk(b, 2 * first_epoch));
  EXPECT_NE(wa, walk(c, 2 * first_epoch));
  // Epoch 1 starts right after epoch 0 and packs another order.
  const std::vector<Window> epoch0(wa.begin(), wa.begin() + std::ptrdiff_t(first_epoch));
  const std::vector<Window> epoch1(wa.begin() + std::ptrdiff_t(first_epoch), wa.end());
  EXPECT_NE(epoch0, epoch1);
}

// ---------------------------------------------------------------------------------------------
// Resume: the k-th window does not depend on what was asked before.

TEST(PackedWindowsResume, AFreshObjectAskedForSampleKMatchesOneThatWalkedThere) {
  std::mt19937_64 rng(99);
  for (const SampleOrder order : {SampleOrder::sequential, SampleOrder::shuffle}) {
    for (const OverlongRecords overlong : {OverlongRecords::truncate, OverlongRecords::drop}) {
      const Dataset d = random_dataset(rng, 60, 12);
      PackedWindows walker(d.lengths, 12, order, 5, overlong);
      u64 five_epochs = 0;
      for (u64 e = 0; e < 5; ++e) five_epochs += walker.windows_in_epoch(e);
      const std::vector<Window> walked = walk(walker, five_epochs);
      // Every sample up to the middle of epoch 5, each epoch's first and last included.
      for (u64 k = 0; k < walked.size(); ++k) {
        PackedWindows fresh(d.lengths, 12, order, 5, overlong);
        ASSERT_EQ(copy(fresh.window(k)), walked[k]) << name_of(order) << " " << name_of(overlong) << " sample " << k;
      }
      // A long-lived object asked in a scrambled order, going back to earlier epochs and forward again.
      std::vector<u64> ks(walked.size());
      std::iota(ks.begin(), ks.end(), 0);
      std::shuffle(ks.begin(), ks.end(), rng);
      PackedWindows scrambled(d.lengths, 12, order, 5, overlong);
      for (u64 k : ks) ASSERT_EQ(copy(scrambled.window(k)), walked[k]) << name_of(order) << " sample " << k;
      // Window counts asked of a fresh object, out of order, agree with the walk's.
      PackedWindows counts(d.lengths, 12, order, 5, overlong);
      for (u64 e : {3ull, 0ull, 4ull, 1ull, 2ull}) EXPECT_EQ(counts.windows_in_epoch(e), walker.windows_in_epoch(e));
    }
  }
}

TEST(PackedWindowsResume, TheStepsSamplesReadTheWindowsOfTheRunsSampleIndex) {
  // G = 3 samples a step; a job resumed at step 4 after 10 samples (an earlier G of 2.5 on average)
  // reads from the run's sample 10 on: step 4 sample 0 is sample 10, step 6 sample 2 is 10 + 2·3 + 2.
  SampleNumbering numbering(3);
  numbering.continue_from(4, 10);
  std::mt19937_64 rng(3);
  const Dataset d = random_dataset(rng, 40, 10);
  PackedWindows packed(d.lengths, 10, SampleOrder::shuffle, 11, OverlongRecords::drop);
  const std::vector<Window> walked = walk(packed, 19);
  PackedWindows resumed(d.lengths, 10, SampleOrder::shuffle, 11, OverlongRecords::drop);
  EXPECT_EQ(copy(resumed.window(numbering.index(4, 0))), walked[10]);
  EXPECT_EQ(copy(resumed.window(numbering.index(6, 2))), walked[18]);
}

}  // namespace test_packed_windows
}  // namespace meshtrain
