// The memory one rank of a layout will use, computed by the code that sizes the trainer's real
// allocations (no separate formula that could drift), for `meshtrain plan`.
#pragma once

#include "core/config.hpp"
#include "core/memory_ledger.hpp"
#include "parallel/topology.hpp"

namespace meshtrain {

// Bytes by category that the trainer allocates on the rank at `position` of `grid` for `cfg`
// (ZeRO stage, precision, recomputation, micro-batch and pipeline slots included).
MemoryBytes planned_rank_memory(const Config& cfg, const Layout& grid, const GridPosition& position);

}  // namespace meshtrain
