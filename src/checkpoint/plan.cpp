// The datasets of a checkpoint and this rank's part in each (checkpoint/plan.hpp).
#include "checkpoint/plan.hpp"

#include "checkpoint/checkpointer.hpp"
#include "io/checkpoint/schema.hpp"

#include <utility>

namespace meshtrain {

io::TensorSlab tensor_piece(const char* group, const TensorInfo& t, bool holds) {
  io::TensorSlab slab;
  slab.name = io::schema::dataset(group, t.name);
  slab.global_shape = t.shape;
  slab.offset = t.piece.offset;
  slab.count = t.piece.count;
  slab.stride = t.piece.stride;
  slab.extent = t.piece.block;
  if (!holds) slab.extent.assign(t.shape.size(), 0);
  return slab;
}

std::vector<PlannedPiece> plan_pieces(const ParameterLayout& layout, const std::vector<StateSource*>& sources) {
  const ParameterLayout all_stages(layout.model(), layout.tp(), layout.tp_rank(), {}, 1, 1, 0, layout.content());
  std::vector<PlannedPiece> plan;
  for (std::size_t g = 0; g < sources.size(); ++g) {
    for (const TensorInfo& t : all_stages.tensors()) {
      const TensorInfo* mine = layout.find_if_held(t.name);
      const bool writes = mine != nullptr && layout.holds_counted_copy(*mine);
      PlannedPiece p{tensor_piece(io::schema::state_groups[g], t, writes), {}, nullptr, nullptr};
      if (writes) {
        p.range = sources[g]->save_range(*mine);
        p.source = sources[g];
        p.tensor = mine;
      }
      plan.push_back(std::move(p));
    }
  }
  return plan;
}

std::uint64_t checkpoint_file_bytes(const ParameterLayout& layout) {
  const ParameterLayout all_stages(layout.model(), layout.tp(), layout.tp_rank(), {}, 1, 1, 0, layout.content());
  std::vector<std::vector<std::uint64_t>> shapes;
  for (std::size_t g = 0; g < std::size(io::schema::state_groups); ++g) {
    for (const TensorInfo& t : all_stages.tensors()) shapes.push_back(t.shape);
  }
  return io::CheckpointWriter::planned_bytes(shapes);
}

std::vector<std::string> dataset_names(const std::vector<PlannedPiece>& plan) {
  std::vector<std::string> names;
  names.reserve(plan.size());
  for (const PlannedPiece& p : plan) names.push_back(p.slab.name);
  return names;
}

}  // namespace meshtrain
