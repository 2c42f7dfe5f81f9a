// The bytes a rank's model states take, by category, as plain functions of the layout (its expert
// parallelism included), the data-parallel degree, the ZeRO stage and the precision: what
// OptimizerState and WorkingCopy
// allocate (they size their buffers with the same PlacedState functions), for the planner
// (`meshtrain plan`), which does not build them.
#pragma once

#include "core/config.hpp"
#include "core/memory_ledger.hpp"
#include "model/parameters.hpp"
#include "state/zero_stage.hpp"

#include <cstddef>

namespace meshtrain {

// Master weights, fp32 gradients, moments, reduction buffers and checkpoint staging, and under
// bf16/fp16 (`precision`) the typed copy's weights and gradients. `layout` padded for ZeRO; its
// expert units sharded over dp / layout.ep() ranks.
MemoryBytes planned_state_memory(const ParameterLayout& layout, int dp, ZeroStage stage, Precision precision);

// LoRA's frozen base (state/frozen_base.hpp): `base` (the model's layout, padded as the adapters') in the
// compute precision, held as the ZeRO stage holds compute weights — whole, or ZeRO-3's slices and rooms.
MemoryBytes planned_frozen_memory(const ParameterLayout& base, int dp, ZeroStage stage, Precision precision);

// Bytes of host memory a background save copies this rank's pieces of the three states into
// (dp_rank: this rank's place in its data-parallel group, whose ep rank `layout` is).
std::size_t checkpoint_snapshot_bytes(const ParameterLayout& layout, int dp, int dp_rank, ZeroStage stage);

}  // namespace meshtrain
