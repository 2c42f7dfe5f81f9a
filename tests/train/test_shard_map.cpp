// The shard map of an expert-parallel layout by hand (share/docs/design.md, Model states): dense
// units sharded over the data-parallel group, the experts' units over the expert-data-parallel
// group; a block's units end to end in its working room, which holds the largest block.
#include "state/shard_map.hpp"

#include "common/small_moe.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace meshtrain {
namespace test_shard_map {

// small_moe(6, 8): units of ep rank 1 of 2 (experts 3..5), all multiples of 4, so dp 4 pads nothing:
//   0 embed_tokens 888 | 1 layers.0 2304 | 2 layers.0.mlp.experts 3·576 | 3 layers.1 4176 |
//   4 layers.2 2304 | 5 layers.2.mlp.experts 1728 | 6 norm 24 | 7 lm_head 888
TEST(ShardMap, DenseUnitsOverDpExpertUnitsOverEdp) {
  const ParameterLayout layout(small_moe(6, 8), 1, 0, StagePlace{}, 4, 2, 1);
  // Data-parallel rank 3 of 4: ep rank 1, expert-data-parallel rank 1 of 2.
  const ShardMap map(layout, UnitGroups{4, 3, 2, 1});
  const std::vector<std::size_t> shard = {222, 576, 864, 1044, 576, 864, 6, 222};
  const std::vector<std::size_t> begin = {0, 888, 3192, 4920, 9096, 11400, 13128, 13152};
  ASSERT_EQ(map.units(), shard.size());
  std::size_t offset = 0;
  for (std::size_t u = 0; u < shard.size(); ++u) {
    EXPECT_EQ(map.unit(u).begin, begin[u]) << u;
    EXPECT_EQ(map.group_size(u), map.unit(u).experts ? 2 : 4) << u;
    EXPECT_EQ(map.shard(u), shard[u]) << u;
    EXPECT_EQ(map.owned_begin(u), begin[u] + (map.unit(u).experts ? 1 : 3) * shard[u]) << u;
    EXPECT_EQ(map.shard_offset(u), offset) << u;
    offset += shard[u];
  }
  EXPECT_EQ(map.shard_total(), offset);
  EXPECT_EQ(map.largest_shard(), 1044u);
  // Expert 4's up_proj lies at 3192 + 576 + 192 = 3960 .. 4152; the rank owns 4056 .. 4920.
  const io::ElementRange up = map.owned_run(layout.find("layers.0.mlp.experts.4.up_proj.weight"));
  EXPECT_EQ(up.first, 96u);
  EXPECT_EQ(up.count, 96u);
  EXPECT_EQ(map.owned_run(layout.find("layers.0.mlp.experts.3.gate_proj.weight")).count, 0u);
  EXPECT_EQ(map.owned_run(layout.find("layers.0.mlp.experts.5.down_proj.weight")).count, 192u);
  // One group for all: the three-argument form.
  const ShardMap one(layout, 4, 3);
  EXPECT_EQ(one.shard(2), 432u);
  EXPECT_EQ(one.owned_begin(2), 3192u + 3 * 432);
}

TEST(ShardMap, BlockUnitsShareTheirRoom) {
  // ep 2: the dense block 1 (4176) is the largest; ep 1: an MoE block, 2304 + 6·576 = 5760.
  for (const auto& [ep, room] : {std::pair{2, std::size_t{4176}}, std::pair{1, std::size_t{5760}}}) {
    SCOPED_TRACE(testing::Message() << "ep " << ep);
    const ParameterLayout layout(small_moe(6, 8), 1, 0, StagePlace{}, 4, ep, 0);
    const ShardMap map(layout, UnitGroups{4, 0, 4 / ep, 0});
    const std::size_t resident = 888 + 24 + 888;
    EXPECT_EQ(map.block_rooms(), 2);
    EXPECT_EQ(map.working_total(), resident + 2 * room);
    EXPECT_EQ(map.block_units(0), (std::vector<std::size_t>{1, 2}));
    EXPECT_EQ(map.block_units(1), (std::vector<std::size_t>{3}));
    EXPECT_EQ(map.block_units(2), (std::vector<std::size_t>{4, 5}));
    EXPECT_EQ(map.working_offset(0), 0u);
    EXPECT_EQ(map.working_offset(6), 888u);
    EXPECT_EQ(map.working_offset(7), 912u);
    EXPECT_EQ(map.working_offset(1), resident);  // block 0: room 0, its own unit first
    EXPECT_EQ(map.working_offset(2), resident + 2304);
    EXPECT_EQ(map.working_offset(3), resident + room);  // block 1: room 1
    EXPECT_EQ(map.working_offset(4), resident);         // block 2: room 0 again
    EXPECT_EQ(map.working_offset(5), resident + 2304);
  }
}

}  // namespace test_shard_map
}  // namespace meshtrain
