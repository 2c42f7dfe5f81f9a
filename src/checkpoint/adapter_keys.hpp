// The keys LoRA adapters were trained under, checked when a run takes them up again (share/docs/usage.md,
// LoRA adapters in and out): a resumed checkpoint's adapters and the adapters an `import --adapter` file
// gives checkpoint.init_weights continue only under the lora.rank, lora.alpha, lora.targets and
// lora.rslora they were trained with. A rank or a target changes the adapters' tensors; alpha and rsLoRA
// change what the same tensors compute, so a run under other values would silently train another model.
// lora.dropout is a training choice, free to change.
#pragma once

#include "core/config.hpp"

#include <string>
#include <string_view>

namespace meshtrain {

// Throws InputError naming the first key of lora.rank, lora.alpha, lora.targets and lora.rslora on which
// `stored` (the config stored in `path`, read through `key`: "checkpoint.resume") and `run` differ, with
// both values and the setting that continues the adapters. Targets compare as resolved for the model
// (all-linear and the list of its modules are the same targets). Nothing when neither is a LoRA run.
void require_same_adapter_keys(const Config& stored, const Config& run, std::string_view key, const std::string& path);

}  // namespace meshtrain
