// Every element of a checkpoint is written by exactly one rank: the ranks' save shares, summed over
// the whole world, are the model's parameters three times (weights and two moments), for layouts of
// every kind — padded vocabulary rows (tp), tied wte on two stages (pp), ZeRO units whose padding
// cuts tensors anywhere. The count to match is the single-rank layout's (no padding, no sharding).
#include "checkpoint/checkpointer.hpp"
#include "state/shard_map.hpp"
#include "state/state_memory.hpp"
#include "state/state_source.hpp"

#include "common/small_moe.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace meshtrain {
namespace test_checkpoint_shares {

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

// Expert parallelism: the saved elements of every rank of a dp 4 · ep 2 world (dp rank d is ep
// rank d mod 2 and expert-data-parallel rank d / 2), marked element by element, cover every
// element of every tensor of the model exactly once — under tensor and pipeline parallelism too.
TEST(CheckpointShares, ExpertParallelWorldSavesEveryElementOnce) {
  const ModelConfig model = small_moe(4, 6);
  const ParameterLayout whole(model);
  const int dp = 4, ep = 2;
  for (int tp : {1, 2}) {
    for (int pp : {1, 2}) {
      for (int zero : {0, 1, 2, 3}) {
        SCOPED_TRACE(testing::Message() << "tp " << tp << " pp " << pp << " zero " << zero);
        const ZeroStage stage{zero};
        std::map<std::string, std::vector<int>> saved;  // by tensor, per global element
        for (int s = 0; s < pp; ++s) {
          for (int t = 0; t < tp; ++t) {
            for (int d = 0; d < dp; ++d) {
              const ParameterLayout layout(model, tp, t, StagePlace{s, pp}, stage.shard_group_size(dp), ep, d % ep);
              const UnitGroups groups = UnitGroups::of_grid(dp, d, ep);
              const ShardMap map(layout, stage.shard_groups(groups));
              for (const TensorInfo& info : layout.tensors()) {
                if (!layout.holds_counted_copy(info)) continue;
                std::vector<int>& seen = saved[info.name];
                seen.resize(whole.find(info.name).numel);
                const io::ElementRange run = StateSlices::saved_run(map, info, stage.replica_groups(groups));
                for (std::uint64_t i = run.first; i < run.first + run.count; ++i)
                  ++seen[std::size_t(info.global_index(i))];
              }
            }
          }
        }
        EXPECT_EQ(saved.size(), whole.tensors().size());
        for (const TensorInfo& t : whole.tensors()) {
          const std::vector<int>& seen = saved[t.name];
          ASSERT_EQ(seen.size(), t.numel) << t.name;
          EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), std::ptrdiff_t(t.numel)) << t.name;
        }
      }
    }
  }
}

}  // namespace test_checkpoint_shares
}  // namespace meshtrain
