// Planned memory of one rank: the sizes the trainer's objects will allocate, asked of the same
// functions they size themselves with (under LoRA: the adapters' states, the frozen base, the model's
// activations with the adapters' own).
#include "plan/memory_plan.hpp"

#include "core/accumulation.hpp"
#include "core/errors.hpp"
#include "io/sft_shard.hpp"
#include "model/gemm_workspace.hpp"
#include "model/language_model.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "state/state_memory.hpp"
#include "train/batch_loader.hpp"

namespace meshtrain {
namespace {

// The model's activations and, for 16-bit models on the host, their GEMMs' fp32 workspace.
template <class Real>
MemoryBytes planned_model_memory(const Config& cfg, int tp, StagePlace place, ActivationSlots slots, int ep) {
  MemoryBytes m;
  const ActivationSizes activations =
      activation_elements<Real>(cfg.model, cfg.train.micro_batch, tp, place, slots, cfg.train.recompute, ep);
  m[MemoryCategory::activations] = std::int64_t(sizeof(Real) * activations.total());
  m[MemoryCategory::workspace] = std::int64_t(model_gemm_workspace_bytes<Real>(cfg.model, cfg.train.micro_batch, tp));
  return m;
}

// Whether data.train (data.valid) names fine-tuning shards, whose loader also holds each sequence's
// documents. A plan may be made before the data exists: then it is sized for token shards.
bool names_packed_data(const std::string& path_or_glob) {
  if (path_or_glob.empty()) return false;
  try {
    return io::names_sft_shards(path_or_glob);
  } catch (const InputError&) {
    return false;
  }
}

}  // namespace

ParameterLayout planned_layout(const Config& cfg, const Layout& grid, const GridPosition& position) {
  return ParameterLayout(cfg.model, grid.tp, grid.tp > 1 ? position.tp_rank : 0, StagePlace{position.pp_rank, grid.pp},
                         ZeroStage{cfg.parallel.zero}.shard_group_size(grid.replicas()), grid.ep, position.ep_rank,
                         cfg.model.lora.enabled() ? LayoutContent::adapters : LayoutContent::model);
}

ParameterLayout planned_frozen_layout(const Config& cfg, const Layout& grid, const GridPosition& position) {
  return ParameterLayout(cfg.model, grid.tp, grid.tp > 1 ? position.tp_rank : 0, StagePlace{position.pp_rank, grid.pp},
                         ZeroStage{cfg.parallel.zero}.shard_group_size(grid.replicas()), grid.ep, position.ep_rank,
                         LayoutContent::model);
}

MemoryBytes planned_rank_memory(const Config& cfg, const Layout& grid, const GridPosition& position) {
  const StagePlace place{position.pp_rank, grid.pp};
  const ZeroStage stage{cfg.parallel.zero};
  const ParameterLayout layout = planned_layout(cfg, grid, position);
  MemoryBytes m = planned_state_memory(layout, grid.replicas(), stage, cfg.train.precision);
  // LoRA's frozen base: the model's tensors in the compute precision, held as compute weights are.
  if (cfg.model.lora.enabled()) {
    m += planned_frozen_memory(planned_frozen_layout(cfg, grid, position), grid.replicas(), stage, cfg.train.precision);
  }
  const int accum = accumulation_steps(cfg, grid.dp);
  const ActivationSlots slots =
      grid.pp > 1 ? ActivationSlots(live_activations(cfg.parallel.schedule, grid.pp, position.pp_rank, accum),
                                    deferred_weights(cfg.parallel.schedule, grid.pp, position.pp_rank, accum))
                  : ActivationSlots();
  if (cfg.train.precision == Precision::fp32) {
    m += planned_model_memory<float>(cfg, grid.tp, place, slots, grid.ep);
  } else {
    // bf16 and fp16 models take the same bytes.
    m += planned_model_memory<bf16>(cfg, grid.tp, place, slots, grid.ep);
  }
  m[MemoryCategory::workspace] +=
      std::int64_t(BatchLoader::bytes_for(cfg.train.micro_batch, cfg.model.seq_len, names_packed_data(cfg.data.train)));
  // Validation (train/validation.hpp) has a loader of its own.
  if (!cfg.data.valid.empty()) {
    m[MemoryCategory::workspace] += std::int64_t(
        BatchLoader::bytes_for(cfg.train.micro_batch, cfg.model.seq_len, names_packed_data(cfg.data.valid)));
  }
  // Background saves copy the rank's share of the three states to host memory.
  if (cfg.checkpoint.async) {
    m[MemoryCategory::workspace] +=
        std::int64_t(checkpoint_snapshot_bytes(layout, grid.replicas(), position.replica_rank(grid), stage));
  }
  return m;
}

}  // namespace meshtrain
