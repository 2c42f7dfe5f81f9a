// What a file holding LoRA adapters must hold (share/docs/usage.md, LoRA adapters in and out), for
// the commands that read one without a run: `export --format peft` and `export --merge-lora`. Two
// kinds of file carry adapters under /model beside a stored config with lora.rank > 0:
//   a LoRA training checkpoint  the adapters only; the base is the file checkpoint.init_weights names
//   an `import --adapter` file  the base model's tensors and a complete set of adapters
// The adapters are named like the tensors they adapt, `.weight` replaced by `.lora_A.weight` [r, in]
// and `.lora_B.weight` [out, r]. Names no Kokkos type: the commands library includes it.
#pragma once

#include "checkpoint/contents.hpp"
#include "core/config.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace meshtrain {

namespace io {
class CheckpointReader;
}

// One adapted weight: the base tensor and its two adapter tensors.
struct AdaptedWeight {
  ModelTensor base;  // "layers.0.self_attn.q_proj.weight" [out, in] (gpt2's Conv1D: [in, out])
  ModelTensor a;     // "layers.0.self_attn.q_proj.lora_A.weight" [r, in]
  ModelTensor b;     // "layers.0.self_attn.q_proj.lora_B.weight" [out, r]
};

// Every weight lora.targets adapts in `model` (model.lora.rank > 0), in the model's tensor order; the
// shapes follow from the base tensors'. InputError naming lora.targets as lora_target_names does.
std::vector<AdaptedWeight> adapted_weights(const ModelConfig& model);

// A file with adapters, checked.
struct LoraFile {
  Config config;                       // its stored config: lora.rank > 0
  std::vector<AdaptedWeight> adapted;  // what its adapters adapt
  bool holds_base = false;             // the base model's tensors are in the file too
};

// The file's stored config and /model checked: a meshtrain checkpoint of a known version whose stored
// config has lora.rank > 0, holding exactly adapted_weights' adapters in their shapes, and beside them
// either no other tensor or exactly the base model's tensors. `wanted_for` says in a refusal what
// needed the adapters ("--format peft"). InputError naming the file and the first tensor at fault.
LoraFile checked_lora_file(const io::CheckpointReader& reader, std::string_view wanted_for);

// Whether the file's stored config has lora.rank > 0 (false for a file without one).
bool stored_config_has_lora(const io::CheckpointReader& reader);

// The tensors under /model of a base file that are not adapters must be exactly the tensors of
// `model`, in their shapes (adapters beside them, as an `import --adapter` file has, are let be).
// `whose` names the model in the message. InputError naming the file and the tensor otherwise.
void require_base_tensors(const io::CheckpointReader& reader, const ModelConfig& model, std::string_view whose);

}  // namespace meshtrain
