// Planned bytes of a rank's model states.
#include "state/state_memory.hpp"

#include "state/gradient_reduction.hpp"
#include "state/placed_state.hpp"
#include "state/state_source.hpp"
#include "state/working_copy.hpp"

namespace meshtrain {

MemoryBytes planned_state_memory(const ParameterLayout& layout, int dp, ZeroStage stage, Precision precision) {
  const ShardMap map(layout, stage.shard_groups(UnitGroups::of_grid(dp, 0, layout.ep())));
  const bool fp32 = precision == Precision::fp32;
  MemoryBytes m;
  m[fp32 ? MemoryCategory::weights : MemoryCategory::master] =
      std::int64_t(PlacedState<float>::bytes_for(map, fp32 ? stage.compute_weights() : ZeroStage::master_copy()));
  m[MemoryCategory::grads] = std::int64_t(PlacedState<float>::bytes_for(map, stage.fp32_grads()));
  m[MemoryCategory::optimizer] = 2 * std::int64_t(PlacedState<float>::bytes_for(map, ZeroStage::moments()));
  m[MemoryCategory::comm_buffers] = std::int64_t(reduction_buffer_elements(map, stage) * sizeof(float));
  m[MemoryCategory::workspace] = std::int64_t(CheckpointStaging::bytes_for(layout));
  // 16-bit copies of either kind take the same bytes.
  if (!fp32) m += WorkingCopy<bf16>::planned(map, stage);
  return m;
}

MemoryBytes planned_frozen_memory(const ParameterLayout& base, int dp, ZeroStage stage, Precision precision) {
  const ShardMap map(base, stage.shard_groups(UnitGroups::of_grid(dp, 0, base.ep())));
  // 16-bit bases of either kind take the same bytes.
  const std::size_t bytes = precision == Precision::fp32 ? PlacedState<float>::bytes_for(map, stage.compute_weights())
                                                         : PlacedState<bf16>::bytes_for(map, stage.compute_weights());
  return MemoryBytes::of(MemoryCategory::weights, bytes);
}

std::size_t checkpoint_snapshot_bytes(const ParameterLayout& layout, int dp, int dp_rank, ZeroStage stage) {
  const UnitGroups groups = UnitGroups::of_grid(dp, dp_rank, layout.ep());
  const ShardMap map(layout, stage.shard_groups(groups));
  std::size_t n = 0;
  for (const TensorInfo& t : layout.tensors()) {
    if (!layout.holds_counted_copy(t)) continue;
    n += StateSlices::saved_run(map, t, stage.replica_groups(groups)).count;
  }
  constexpr std::size_t saved_states = 3;  // the weights and the two moments
  return saved_states * n * sizeof(float);
}

}  // namespace meshtrain
