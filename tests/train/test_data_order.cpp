// Data order (share/docs/usage.md, Data order): which window each sample of each step reads.
//
// `sequential` is checked against a window counter that simply wraps at W (and against literal
// lists for a tiny case); `shuffle` against the properties a per-epoch permutation must have
// (each window once per epoch, reproducible from the seed, different across seeds and epochs,
// roughly uniform, independent of call history).
#include "core/errors.hpp"
#include "train/data_order.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace meshtrain {
namespace test_data_order {

using u64 = std::uint64_t;

// ---------------------------------------------------------------------------------------------
// Window count W = floor((N − 1) / T), as literal numbers.

TEST(DataOrderSequential, WindowCountIsFloorOfTokensMinusOneOverSeqLen) {
  struct Case {
    u64 tokens;
    int seq_len;
    u64 windows;
  };
  const Case cases[] = {
      {4 * 10 + 1, 4, 10},  // N = T·k + 1: exactly k windows
      {4 * 10, 4, 9},       // N = T·k: the last window has no target for its last input
      {4 * 10 + 3, 4, 10},  // N = T·k + 3
      {4 * 11, 4, 10},      // N = T·(k+1): k windows, since N − 1 = T·k + (T−1)
      {5, 4, 1},            // N = T + 1: the smallest stream that works
      {2, 1, 1},            // T = 1
      {101, 1, 100},
      {1000, 7, 142},                       // 999 / 7 = 142.7
      {1025, 8, 128},                       // 1024 / 8
      {5'000'000'000ull, 1024, 4'882'812},  // more than 2^32 tokens: 4'882'812 · 1024 = 4'999'999'488
  };
  for (const auto& c : cases) {
    DataOrder order(c.tokens, c.seq_len, 4, SampleOrder::sequential, 1);
    EXPECT_EQ(order.windows(), c.windows) << "N = " << c.tokens << ", T = " << c.seq_len;
    DataOrder shuffled(c.tokens, c.seq_len, 4, SampleOrder::shuffle, 1);
    EXPECT_EQ(shuffled.windows(), c.windows) << "shuffle, N = " << c.tokens << ", T = " << c.seq_len;
  }
}

TEST(DataOrderSequential, TooFewTokensThrowsInputError) {
  for (const SampleOrder order : {SampleOrder::sequential, SampleOrder::shuffle}) {
    EXPECT_THROW(DataOrder(0, 4, 2, order, 1), InputError) << name_of(order);
    EXPECT_THROW(DataOrder(1, 4, 2, order, 1), InputError) << name_of(order);
    EXPECT_THROW(DataOrder(3, 4, 2, order, 1), InputError) << name_of(order);
    EXPECT_THROW(DataOrder(4, 4, 2, order, 1), InputError) << name_of(order);  // N = T: no target for the last input
    EXPECT_THROW(DataOrder(1, 1, 2, order, 1), InputError) << name_of(order);
    EXPECT_THROW(DataOrder(1024, 1024, 8, order, 1), InputError) << name_of(order);
    EXPECT_NO_THROW(DataOrder(5, 4, 2, order, 1)) << name_of(order);  // N = T + 1
    EXPECT_NO_THROW(DataOrder(1025, 1024, 8, order, 1)) << name_of(order);
  }
}

// ---------------------------------------------------------------------------------------------
// Sequential windows.

TEST(DataOrderSequential, TinyCaseMatchesLiteralList) {
  // N = 21, T = 4: W = 5. G = 3 does not divide 5, so steps wrap in the middle.
  DataOrder order(21, 4, 3, SampleOrder::sequential, 123);
  ASSERT_EQ(order.windows(), 5u);
  const std::vector<std::vector<u64>> expected = {
      {0, 1, 2}, {3, 4, 0}, {1, 2, 3}, {4, 0, 1}, {2, 3, 4}, {0, 1, 2}, {3, 4, 0},
  };
  for (std::size_t s = 0; s < expected.size(); ++s)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(order.window(std::int64_t(s), j), expected[s][std::size_t(j)]) << "step " << s << " sample " << j;
}

TEST(DataOrderSequential, MatchesWrappingCounter) {
  struct Case {
    u64 tokens;
    int seq_len;
    int global_batch;
  };
  const Case cases[] = {
      {41, 4, 3},     // W = 10, G = 3 (W not a multiple of G)
      {40, 4, 3},     // W = 9 = 3·3
      {100, 7, 5},    // W = 14
      {1025, 8, 16},  // W = 128, a multiple of G
      {21, 4, 7},     // W = 5 < G = 7: one step covers more than an epoch
      {5, 4, 4},      // W = 1: always window 0
      {1000, 3, 1},   // G = 1
  };
  for (const auto& c : cases) {
    DataOrder order(c.tokens, c.seq_len, c.global_batch, SampleOrder::sequential, 7);
    const u64 W = (c.tokens - 1) / u64(c.seq_len);
    ASSERT_EQ(order.windows(), W);
    // A counter that runs through the samples of the run and wraps at W.
    u64 expected = 0;
    const std::int64_t steps = std::int64_t(3 * W / u64(c.global_batch) + 4);
    for (std::int64_t s = 0; s < steps; ++s) {
      for (int j = 0; j < c.global_batch; ++j) {
        ASSERT_EQ(order.window(s, j), expected) << "N = " << c.tokens << " T = " << c.seq_len
                                                << " G = " << c.global_batch << " step " << s << " sample " << j;
        expected = expected + 1 == W ? 0 : expected + 1;
      }
    }
  }
}

TEST(DataOrderSequential, LargeStepsUseSixtyFourBitIndices) {
  // N = 5e9, T = 1024: W = 4'882'812. Step 10^7 of G = 512 starts at sample 5.12e9 > 2^32;
  // 5'120'000'000 mod 4'882'812 = 2'813'024 (worked out separately).
  DataOrder order(5'000'000'000ull, 1024, 512, SampleOrder::sequential, 1);
  ASSERT_EQ(order.windows(), 4'882'812u);
  EXPECT_EQ(order.window(10'000'000, 0), 2'813'024u);
  EXPECT_EQ(order.window(10'000'000, 511), 2'813'024u + 511);
  // 2^32 / 512 = 8'388'608 steps: sample index exactly 2^32 = 4'294'967'296;
  // 4'294'967'296 mod 4'882'812 = 4'294'967'296 − 879·4'882'812 = 2'975'548.
  EXPECT_EQ(order.window(8'388'608, 0), 2'975'548u);
}

// ---------------------------------------------------------------------------------------------
// The run's sample index (train/sample_numbering.hpp): s·G + j, and S0 + (s − s0)·G + j after
// continue_from(s0, S0), as literal numbers.

TEST(DataOrderSampleIndex, CountsSamplesFromTheStartOrFromACheckpoint) {
  DataOrder order(1001, 10, 4, SampleOrder::sequential, 1);  // W = 100
  EXPECT_EQ(order.sample_index(0, 0), 0u);
  EXPECT_EQ(order.sample_index(0, 3), 3u);
  EXPECT_EQ(order.sample_index(7, 2), 30u);
  // Resumed at step 5 after 12 samples (an earlier global batch of 2 and a bit): step 5 reads from
  // sample 12 on, step 8 sample 1 is 12 + 3·4 + 1 = 25.
  order.continue_from(5, 12);
  EXPECT_EQ(order.sample_index(5, 0), 12u);
  EXPECT_EQ(order.sample_index(8, 1), 25u);
  EXPECT_EQ(order.window(8, 1), 25u);
  // The same rule on its own, as fine-tuning runs hold it.
  SampleNumbering numbering(4);
  EXPECT_EQ(numbering.index(7, 2), 30u);
  numbering.continue_from(5, 12);
  EXPECT_EQ(numbering.index(8, 1), 25u);
  // Past 2^32: step 10^9 of G = 4 after a resume at step 10 with 100 samples: 100 + (10^9 − 10)·4 + 7.
  numbering.continue_from(10, 100);
  EXPECT_EQ(numbering.index(1'000'000'000, 7), 4'000'000'067u);
}

// ---------------------------------------------------------------------------------------------
// Shuffled windows.

// The windows read by the samples [epoch·W, (epoch+1)·W) of the run, one epoch.
std::vector<u64> epoch_windows(DataOrder& order, int global_batch, u64 epoch) {
  const u64 W = order.windows();
  std::vector<u64> out;
  out.reserve(W);
  for (u64 k = epoch * W; k < (epoch + 1) * W; ++k)
    out.push_back(order.window(std::int64_t(k / u64(global_batch)), int(k % u64(global_batch))));
  return out;
}

bool is_permutation_of_range(const std::vector<u64>& v) {
  std::vector<int> seen(v.size(), 0);
  for (u64 w : v) {
    if (w >= v.size() || seen[w]) return false;
    seen[w] = 1;
  }
  return true;
}

TEST(DataOrderShuffle, EveryEpochIsAPermutationOfAllWindows) {
  struct Case {
    u64 tokens;
    int seq_len;
    int global_batch;
  };
  const Case cases[] = {
      {5, 4, 2},       // W = 1
      {9, 4, 3},       // W = 2
      {41, 4, 3},      // W = 10
      {100, 7, 5},     // W = 14
      {21, 4, 7},      // W = 5 < G
      {1025, 8, 16},   // W = 128
      {10001, 10, 8},  // W = 1000
  };
  for (const auto& c : cases) {
    DataOrder order(c.tokens, c.seq_len, c.global_batch, SampleOrder::shuffle, 1234);
    const u64 W = order.windows();
    for (u64 epoch = 0; epoch < 6; ++epoch) {
      const auto windows = epoch_windows(order, c.global_batch, epoch);
      ASSERT_EQ(windows.size(), W);
      EXPECT_TRUE(is_permutation_of_range(windows))
          << "N = " << c.tokens << " T = " << c.seq_len << " G = " << c.global_batch << " epoch " << epoch;
    }
  }
}

TEST(DataOrderShuffle, FreeFunctionGivesPermutations) {
  for (u64 n : {1ull, 2ull, 3ull, 17ull, 1000ull}) {
    for (u64 epoch = 0; epoch < 4; ++epoch) {
      const auto perm = shuffled_windows(n, 99, epoch);
      ASSERT_EQ(perm.size(), n);
      EXPECT_TRUE(is_permutation_of_range(perm)) << "n = " << n << " epoch " << epoch;
    }
  }
  EXPECT_TRUE(shuffled_windows(0, 1, 0).empty());
}

TEST(DataOrderShuffle, ActuallyShufflesAndDiffersFromSequential) {
  DataOrder order(1001, 10, 4, SampleOrder::shuffle, 5);  // W = 100
  std::vector<u64> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  for (u64 epoch = 0; epoch < 4; ++epoch) {
    const auto windows = epoch_windows(order, 4, epoch);
    EXPECT_NE(windows, identity) << "epoch " << epoch;
    // Not just a rotation or a reversal either: count fixed points of w ↦ w + 1 adjacency.
    int adjacent = 0;
    for (std::size_t i = 1; i < windows.size(); ++i) adjacent += windows[i] == windows[i - 1] + 1;
    EXPECT_LT(adjacent, 15) << "epoch " << epoch << ": mostly consecutive windows";
  }
}

TEST(DataOrderShuffle, SameSeedSameOrderOtherSeedOrEpochDifferent) {
  const u64 tokens = 2001;  // T = 20: W = 100
  DataOrder a(tokens, 20, 6, SampleOrder::shuffle, 42);
  DataOrder b(tokens, 20, 6, SampleOrder::shuffle, 42);
  DataOrder c(tokens, 20, 6, SampleOrder::shuffle, 43);
  DataOrder d(tokens, 20, 6, SampleOrder::shuffle, u64(42) | (u64(1) << 32));  // differs only in the high word
  DataOrder e(tokens, 20, 6, SampleOrder::shuffle, 0);
  // A different global batch does not change which window the k-th sample reads.
  DataOrder f(tokens, 20, 10, SampleOrder::shuffle, 42);
  for (u64 epoch = 0; epoch < 5; ++epoch) {
    const auto wa = epoch_windows(a, 6, epoch);
    EXPECT_EQ(wa, epoch_windows(b, 6, epoch)) << "epoch " << epoch;
    EXPECT_EQ(wa, epoch_windows(f, 10, epoch)) << "epoch " << epoch;
    EXPECT_NE(wa, epoch_windows(c, 6, epoch)) << "epoch " << epoch;
    EXPECT_NE(wa, epoch_windows(d, 6, epoch)) << "epoch " << epoch;
    EXPECT_NE(wa, epoch_windows(e, 6, epoch)) << "epoch " << epoch;
  }
  // Every pair of the first 8 epochs differs.
  std::vector<std::vector<u64>> epochs;
  for (u64 epoch = 0; epoch < 8; ++epoch) epochs.push_back(epoch_windows(a, 6, epoch));
  for (std::size_t i = 0; i < epochs.size(); ++i)
    for (std::size_t j = i + 1; j < epochs.size(); ++j) EXPECT_NE(epochs[i], epochs[j]) << i << " vs " << j;
}

// Pearson's statistic for counts against a uniform expectation.
double chi_square_uniform(const std::vector<double>& counts) {
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  const double expected = total / double(counts.size());
  double chi2 = 0;
  for (double c : counts) chi2 += (c - expected) * (c - expected) / expected;
  return chi2;
}

TEST(DataOrderShuffle, PositionOfWindowZeroIsRoughlyUniformOverEpochs) {
  // W = 10, 20'000 epochs: the position of window 0 should be uniform on 10 positions.
  // 9 degrees of freedom: mean 9, P(χ² > 40) ≈ 8e-6. A loose bound catches a broken shuffle
  // (e.g. a Sattolo cycle never leaves window 0 in place, an off-by-one never moves the last one).
  const int W = 10, G = 3;
  DataOrder order(u64(W) * 8 + 1, 8, G, SampleOrder::shuffle, 2024);
  ASSERT_EQ(order.windows(), u64(W));
  std::vector<double> position_counts(W, 0.0);
  std::vector<double> last_counts(W, 0.0);  // which window sits at the last position
  const u64 epochs = 20'000;
  for (u64 epoch = 0; epoch < epochs; ++epoch) {
    const auto windows = epoch_windows(order, G, epoch);
    position_counts[std::size_t(std::find(windows.begin(), windows.end(), 0u) - windows.begin())] += 1;
    last_counts[windows.back()] += 1;
  }
  EXPECT_LT(chi_square_uniform(position_counts), 40.0);
  EXPECT_LT(chi_square_uniform(last_counts), 40.0);
  for (int p = 0; p < W; ++p) EXPECT_GT(position_counts[std::size_t(p)], 0) << "window 0 never at position " << p;
}

TEST(DataOrderShuffle, PositionValueTableIsRoughlyUniformOverSeeds) {
  // W = 5, epoch 0, 20'000 seeds: each of the 25 (position, window) cells expects 4'000.
  // Each row of the table sums to the number of seeds, so 16 degrees of freedom: mean 16,
  // P(χ² > 60) ≈ 5e-7.
  const int W = 5;
  std::vector<double> cells(std::size_t(W * W), 0.0);
  for (u64 seed = 0; seed < 20'000; ++seed) {
    DataOrder order(u64(W) * 4 + 1, 4, 2, SampleOrder::shuffle, seed * 0x9E3779B97F4A7C15ull);
    const auto windows = epoch_windows(order, 2, 0);
    for (int p = 0; p < W; ++p) cells[std::size_t(p * W) + windows[std::size_t(p)]] += 1;
  }
  EXPECT_LT(chi_square_uniform(cells), 60.0);
}

TEST(DataOrderShuffle, DependsOnlyOnStepAndSampleNotOnCallHistory) {
  // W = 7, G = 3: epochs straddle steps. Query a long-lived object in a scrambled order and
  // compare each answer with a fresh object asked only that one question.
  const u64 tokens = 7 * 5 + 1;
  const int T = 5, G = 3;
  std::vector<std::pair<std::int64_t, int>> queries;
  for (std::int64_t s = 0; s < 40; ++s)
    for (int j = 0; j < G; ++j) queries.emplace_back(s, j);
  queries.emplace_back(1'000'000, 2);
  queries.emplace_back(123'457, 0);
  std::mt19937_64 rng(17);
  std::shuffle(queries.begin(), queries.end(), rng);
  // Repeat some queries so that the object sees epochs again after others.
  const auto first = queries;
  queries.insert(queries.end(), first.rbegin(), first.rend());

  DataOrder long_lived(tokens, T, G, SampleOrder::shuffle, 77);
  DataOrder sequential_long_lived(tokens, T, G, SampleOrder::sequential, 77);
  for (const auto& [s, j] : queries) {
    DataOrder fresh(tokens, T, G, SampleOrder::shuffle, 77);
    EXPECT_EQ(long_lived.window(s, j), fresh.window(s, j)) << "step " << s << " sample " << j;
    DataOrder fresh_sequential(tokens, T, G, SampleOrder::sequential, 77);
    EXPECT_EQ(sequential_long_lived.window(s, j), fresh_sequential.window(s, j)) << "step " << s << " sample " << j;
  }
  // And in order, the epochs built from a scrambled history are permutations.
  for (u64 epoch = 0; epoch < 10; ++epoch) EXPECT_TRUE(is_permutation_of_range(epoch_windows(long_lived, G, epoch)));
}

}  // namespace test_data_order
}  // namespace meshtrain
