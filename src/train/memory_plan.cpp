// Planned memory of one rank. PROVISIONAL: model states of stage 0 only, replaced by the ZeRO
// state's own sizing in the ZeRO commit.
#include "train/memory_plan.hpp"

#include "model/parameters.hpp"

namespace meshtrain {

MemoryBytes planned_rank_memory(const Config& cfg, const Layout& grid, const GridPosition& position) {
  const ParameterLayout layout(cfg.model, grid.tp, position.tp_rank, StagePlace{position.pp_rank, grid.pp});
  const auto n = static_cast<std::int64_t>(layout.total());
  MemoryBytes m;
  m[MemoryCategory::weights] = 4 * n;
  m[MemoryCategory::grads] = 4 * n;
  m[MemoryCategory::optimizer] = 8 * n;
  return m;
}

}  // namespace meshtrain
