// The memory one rank of a layout will use, computed by the code that sizes the trainer's real
// allocations (no separate formula that could drift), for `meshtrain plan`.
#pragma once

#include "core/config.hpp"
#include "core/memory_ledger.hpp"
#include "model/parameters.hpp"
#include "parallel/topology.hpp"

namespace meshtrain {

// The trainer's layout of the rank at `position` (state/model_state.cpp): its tensor-parallel
// piece, its stage, the experts of its ep rank (parallel.ep; data-parallel rank d is ep rank
// d mod ep: state/unit_groups.hpp), units padded to a multiple of dp under ZeRO. Under LoRA
// (cfg.model.lora) the layout of its trained tensors, the adapters (ParameterLayout::adapters).
ParameterLayout planned_layout(const Config& cfg, const Layout& grid, const GridPosition& position);
// LoRA's frozen base on that rank: the model's tensors, unpadded (state/frozen_base.hpp).
ParameterLayout planned_frozen_layout(const Config& cfg, const Layout& grid, const GridPosition& position);

// Bytes by category that the trainer allocates on the rank at `position` of `grid` for `cfg`
// (ZeRO stage, precision, recomputation, micro-batch and pipeline slots included; under LoRA the
// adapters' states, the frozen base in the compute precision and the adapters' activations).
MemoryBytes planned_rank_memory(const Config& cfg, const Layout& grid, const GridPosition& position);

}  // namespace meshtrain
