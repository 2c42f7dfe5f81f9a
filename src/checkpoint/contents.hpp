// What a checkpoint file must hold before any of its tensors is read or anything is allocated for
// them: exactly the tensors of the model that loads it, by name and shape. One rule for loading
// (checkpoint/load.cpp: the run's model) and for the commands that read a checkpoint without
// a run (`inspect`, `export`, `sample`: the model of the file's stored config), so that no tool
// passes a file the trainer refuses (share/docs/usage.md, Files checked before they are used).
// Names no Kokkos type: the commands library includes it.
#pragma once

#include "core/config.hpp"
#include "core/lora_targets.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain {

namespace io {
class CheckpointReader;
}

// One tensor of a model whole, as a checkpoint stores it: its name and global shape.
struct ModelTensor {
  std::string name;
  std::vector<std::uint64_t> shape;
};

// Every tensor of `model` (as one rank of one stage holds them), in the model's order; with
// LayoutContent::adapters its LoRA adapters' (model.lora).
std::vector<ModelTensor> model_tensors(const ModelConfig& model, LayoutContent content = LayoutContent::model);

// The datasets under each of `groups` (io/checkpoint/schema.hpp's state groups) must be exactly the
// tensors of `model`, each in its global shape. InputError naming the file and the first dataset
// that is extra, missing or of another shape, with what would be valid; `whose` names the model in
// the message ("this model", "the model of its stored config"). `content`: the model's tensors or its
// LoRA adapters. The model's tensors of a LoRA run (model.lora) may come with adapter tensors beside them
// (an init_weights file with a PEFT adapter imported), which this leaves to the adapters' load.
void require_model_tensors(const io::CheckpointReader& reader, const ModelConfig& model,
                           const std::vector<const char*>& groups, std::string_view whose,
                           LayoutContent content = LayoutContent::model);

// The model a file holds, checked as loading checks it: a format version this build reads, tensors
// under /model, and for a meshtrain checkpoint (root attribute `format`) a stored config that parses
// as the trainer's INI, a model_family that agrees with it, and exactly the tensors of its model
// under /model and, `with_optimizer`, under each /optim group the file has. Returns the stored
// config; nothing for a weights file of another tool (h5py), which holds no config to check its
// tensors against. InputError naming the file otherwise.
std::optional<Config> checked_stored_model(const io::CheckpointReader& reader, bool with_optimizer);

}  // namespace meshtrain
