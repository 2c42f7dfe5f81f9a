// The data-parallel groups of a rank's shard units (share/docs/design.md, Model states), as sizes
// and the rank's place: the dense units' group is the data-parallel group (dp ranks), the routed
// experts' units' (ShardUnit::experts) the expert-data-parallel group, the dp / ep ranks that hold
// the same experts. Without expert parallelism the two are one. ZeRO shards a unit over its group;
// stage 0 replicates it over the group (state/zero_stage.hpp).
#pragma once

namespace meshtrain {

struct UnitGroups {
  int dense_size = 1, dense_rank = 0;
  int expert_size = 1, expert_rank = 0;

  int size(bool experts) const { return experts ? expert_size : dense_size; }
  int rank(bool experts) const { return experts ? expert_rank : dense_rank; }
  // Whether expert units go over another group than the dense ones (ep > 1).
  bool distinct() const { return expert_size != dense_size; }

  // One group for all units.
  static UnitGroups one(int size, int rank) { return {size, rank, size, rank}; }
  // Data-parallel rank d of dp under expert parallelism ep, in Megatron's placement
  // (parallel/topology.hpp): an expert-parallel group is ep neighbouring data-parallel ranks, so d
  // is ep rank d mod ep and expert-data-parallel rank d / ep of dp / ep.
  static UnitGroups of_grid(int dp, int dp_rank, int ep) { return {dp, dp_rank, dp / ep, dp_rank / ep}; }
  static int ep_rank(int dp_rank, int ep) { return dp_rank % ep; }
};

}  // namespace meshtrain
