// BatchLoader (train/batch_loader.hpp): each load's inputs and targets are the windows the data
// order names, read here from the token values themselves (token i of the stream is i mod 65521),
// and a load's tokens stay intact through the next load (the two slots take turns), under a
// shuffled order with a data-parallel rank's first micro-batch; under context parallelism each rank of
// the group the same samples' rows at its chunks' positions.
#include "io/token_shard.hpp"
#include "train/batch_loader.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace meshtrain {
namespace test_batch_loader {

std::vector<int> to_host(CVec<int> x) {
  ExecSpace().fence();
  std::vector<int> out(x.extent(0));
  Kokkos::deep_copy(Kokkos::View<int*, HostSpace>(out.data(), out.size()), x);
  return out;
}

TEST(BatchLoader, LoadsTheWindowsOfTheDataOrderAndKeepsThemUntilTheLoadAfterNext) {
  constexpr int T = 8, B = 3, accum = 2, dp = 2, global = B * accum * dp;
  constexpr std::uint16_t wrap = 65521;
  std::vector<std::uint16_t> tokens(40 * T + 5);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = std::uint16_t(i % wrap);
  const auto path =
      std::filesystem::temp_directory_path() / ("meshtrain_test_batch_loader_" + std::to_string(::getpid()) + ".bin");
  io::write_token_shard(path.string(), tokens);
  const io::TokenStream stream = io::TokenStream::open(path.string());
  DataOrder order(stream.size(), T, global, SampleOrder::shuffle, 7);
  DataOrder reference(stream.size(), T, global, SampleOrder::shuffle, 7);
  const int first = 1 * accum;  // dp rank 1
  BatchLoader loader(stream, order, B, T, first);

  std::vector<int> previous_inputs;
  CVec<int> previous;
  for (std::int64_t step = 0; step < 3; ++step) {
    for (int micro = 0; micro < accum; ++micro) {
      loader.load(step, micro);
      std::vector<int> inputs_expected, targets_expected;
      for (int b = 0; b < B; ++b) {
        const std::uint64_t w = reference.window(step, (first + micro) * B + b);
        for (int t = 0; t < T; ++t) {
          inputs_expected.push_back(int((w * T + t) % wrap));
          targets_expected.push_back(int((w * T + t + 1) % wrap));
        }
      }
      EXPECT_EQ(to_host(loader.inputs()), inputs_expected) << "step " << step << " micro " << micro;
      EXPECT_EQ(to_host(loader.targets()), targets_expected) << "step " << step << " micro " << micro;
      // The load before this one still holds its tokens, in a buffer of its own.
      if (!previous_inputs.empty()) {
        EXPECT_NE(previous.data(), loader.inputs().data());
        EXPECT_EQ(to_host(previous), previous_inputs);
      }
      previous = loader.inputs();
      previous_inputs = inputs_expected;
    }
  }
  std::filesystem::remove(path);
}

// cp 3 over sequences of 12 positions (chunks of 2): rank r's rows are positions 2r, 2r + 1 and
// 2(5 − r), 2(5 − r) + 1 of every sequence its dp rank reads, for inputs and targets alike.
TEST(BatchLoader, KeepsAContextParallelRanksChunksOfEachSequence) {
  constexpr int T = 12, B = 2, cp = 3;
  std::vector<std::uint16_t> tokens(20 * T + 3);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = std::uint16_t(i);
  const auto path = std::filesystem::temp_directory_path() /
                    ("meshtrain_test_batch_loader_cp_" + std::to_string(::getpid()) + ".bin");
  io::write_token_shard(path.string(), tokens);
  const io::TokenStream stream = io::TokenStream::open(path.string());
  DataOrder reference(stream.size(), T, B, SampleOrder::shuffle, 5);
  for (int rank = 0; rank < cp; ++rank) {
    DataOrder order(stream.size(), T, B, SampleOrder::shuffle, 5);
    BatchLoader loader(stream, order, B, T, 0, ExecSpace(), ContextChunks::of_rank(rank, cp, T));
    for (std::int64_t step = 0; step < 2; ++step) {
      loader.load(step, 0);
      std::vector<int> inputs_expected, targets_expected;
      for (int b = 0; b < B; ++b) {
        const std::uint64_t w = reference.window(step, b);
        for (int t : {2 * rank, 2 * rank + 1, 2 * (2 * cp - 1 - rank), 2 * (2 * cp - 1 - rank) + 1}) {
          inputs_expected.push_back(int(w * T + t));
          targets_expected.push_back(int(w * T + t + 1));
        }
      }
      EXPECT_EQ(to_host(loader.inputs()), inputs_expected) << "rank " << rank << " step " << step;
      EXPECT_EQ(to_host(loader.targets()), targets_expected) << "rank " << rank << " step " << step;
    }
  }
  std::filesystem::remove(path);
}

}  // namespace test_batch_loader
}  // namespace meshtrain
