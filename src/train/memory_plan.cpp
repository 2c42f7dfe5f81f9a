// Planned memory of one rank: the sizes the trainer's objects will allocate, asked of the same
// functions they size themselves with.
#include "train/memory_plan.hpp"

#include "model/gpt2.hpp"
#include "parallel/schedule.hpp"
#include "train/batch_loader.hpp"
#include "train/checkpointing.hpp"
#include "train/low_precision_copy.hpp"
#include "train/pipeline_executor.hpp"
#include "train/accumulation.hpp"
#include "train/state_source.hpp"
#include "train/zero_state.hpp"

namespace meshtrain {

MemoryBytes planned_rank_memory(const Config& cfg, const Layout& grid, const GridPosition& position) {
  const StagePlace place{position.pp_rank, grid.pp};
  const int zero = cfg.parallel.zero;
  const ParameterLayout layout(cfg.model, grid.tp, position.tp_rank, place, zero > 0 ? grid.dp : 1);
  MemoryBytes m;
  if (zero > 0) {
    m = zero_sizes(layout, grid.dp, zero, cfg.train.precision != Precision::fp32).bytes();
  } else {
    const auto n = std::int64_t(layout.total() * sizeof(float));
    m[MemoryCategory::weights] = n;
    m[MemoryCategory::grads] = n;
    m[MemoryCategory::optimizer] = 2 * n;
    m[MemoryCategory::workspace] = 3 * std::int64_t(FlatSource::staging_bytes_for(layout));
  }
  const int accum = accumulation_steps(cfg, grid.dp);
  const int slots =
      grid.pp > 1 ? pipeline_slots(pipeline_schedule(cfg.parallel.schedule, grid.pp, position.pp_rank, accum)) : 1;
  if (cfg.train.precision == Precision::fp32) {
    const ActivationSizes activations = gpt2_activation_elements(cfg.model, cfg.train.micro_batch, grid.tp, place,
                                                                 slots, cfg.train.recompute);
    m[MemoryCategory::activations] += std::int64_t(sizeof(float) * activations.total());
  } else {
    // The fp32 weights are the master copy; the 16-bit copy brings its weights, gradients, activations.
    m[MemoryCategory::master] = m[MemoryCategory::weights];
    m[MemoryCategory::weights] = 0;
    m += LowPrecisionCopy::planned(cfg, layout, grid.tp, grid.dp, place, slots);
  }
  m[MemoryCategory::workspace] += std::int64_t(BatchLoader::bytes_for(cfg.train.micro_batch, cfg.model.seq_len));
  // Background saves copy the rank's share of the three states to host memory.
  if (cfg.checkpoint.async) {
    m[MemoryCategory::workspace] += std::int64_t(checkpoint_snapshot_bytes(layout, grid.dp, position.dp_rank, zero));
  }
  return m;
}

}  // namespace meshtrain
