// Which datasets a checkpoint holds and this rank's part in each: every rank takes part in every
// dataset's collective write, most with nothing. Each element is written once: the data-parallel
// group's save ranges split a tensor (state/state_source.hpp), and of a tensor held by several
// tensor-parallel ranks or stages only the copy ParameterLayout::holds_counted_copy names is written.
#pragma once

#include "io/checkpoint/file.hpp"
#include "model/parameters.hpp"
#include "state/state_source.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

// One dataset of the file and this rank's part in it.
struct PlannedPiece {
  io::TensorSlab slab;
  io::ElementRange range;
  StateSource* source = nullptr;  // null where the rank writes nothing
  const TensorInfo* tensor = nullptr;
};

// This rank's piece of tensor t in `group` (io/checkpoint/schema.hpp) as the layout describes it,
// or an empty piece where the rank does not hold it.
io::TensorSlab tensor_piece(const char* group, const TensorInfo& t, bool holds);

// The datasets of the first sources.size() state groups (all three, or /model alone), each group
// listing every stage's tensors in one order on every rank.
std::vector<PlannedPiece> plan_pieces(const ParameterLayout& layout, const std::vector<StateSource*>& sources);

// The bytes a checkpoint file of this model takes at most (io::CheckpointWriter::planned_bytes of
// every dataset of the three state groups): what a save reserves, what its failure reports, and
// what the start checks want free in checkpoint.dir. Its float32 data are the sum over the ranks
// of checkpoint_snapshot_bytes (state/state_memory.hpp), every element being saved once.
std::uint64_t checkpoint_file_bytes(const ParameterLayout& layout);

// The dataset names of a plan, in its order.
std::vector<std::string> dataset_names(const std::vector<PlannedPiece>& plan);

}  // namespace meshtrain
