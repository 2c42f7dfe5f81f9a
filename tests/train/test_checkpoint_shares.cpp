// Every element of a checkpoint is written by exactly one rank: the ranks' save shares, summed over
// the whole world, are the model's parameters three times (weights and two moments), for layouts of
// every kind — padded vocabulary rows (tp), tied wte on two stages (pp), ZeRO units whose padding
// cuts tensors anywhere. The count to match is the single-rank layout's (no padding, no sharding).
#include "state/state_memory.hpp"
#include "train/checkpointing.hpp"

#include <gtest/gtest.h>

namespace meshtrain {
namespace {

std::size_t world_total_shares(const ModelConfig& model, int dp, int tp, int pp, int zero) {
  std::size_t bytes = 0;
  for (int s = 0; s < pp; ++s) {
    for (int t = 0; t < tp; ++t) {
      const ParameterLayout layout(model, tp, t, StagePlace{s, pp}, zero > 0 ? dp : 1);
      for (int d = 0; d < dp; ++d) bytes += checkpoint_snapshot_bytes(layout, dp, d, ZeroStage{zero});
    }
  }
  return bytes;
}

TEST(CheckpointShares, EveryElementIsSavedOnce) {
  ModelConfig model;
  model.layers = 4;
  model.heads = 6;
  model.d_model = 30;  // heads of 5 channels
  model.vocab = 61;    // padded to a multiple of tp
  model.seq_len = 7;
  const std::size_t want = 3 * sizeof(float) * ParameterLayout(model).total();
  for (int dp : {1, 2, 3, 4}) {
    for (int tp : {1, 2, 3}) {
      for (int pp : {1, 2, 4}) {
        for (int zero : {0, 1, 2, 3}) {
          EXPECT_EQ(world_total_shares(model, dp, tp, pp, zero), want)
              << "dp " << dp << " tp " << tp << " pp " << pp << " zero " << zero;
        }
      }
    }
  }
}

TEST(CheckpointShares, ZeroSharesAreEvenAcrossTheGroup) {
  ModelConfig model;
  model.layers = 2;
  model.heads = 4;
  model.d_model = 32;
  model.vocab = 256;
  model.seq_len = 16;
  // Each rank holds about a quarter: no rank writes more than its shard of every unit.
  const ParameterLayout layout(model, 1, 0, StagePlace{}, 4);
  const std::size_t whole = 3 * sizeof(float) * ParameterLayout(model).total();
  for (int d = 0; d < 4; ++d) {
    const std::size_t mine = checkpoint_snapshot_bytes(layout, 4, d, ZeroStage{1});
    EXPECT_LE(mine, whole / 4 + 3 * sizeof(float) * layout.units().size() * 4) << "rank " << d;
    EXPECT_GE(mine + 3 * sizeof(float) * layout.units().size() * 4, whole / 4) << "rank " << d;
  }
}

}  // namespace
}  // namespace meshtrain
