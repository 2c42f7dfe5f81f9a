// The PEFT adapter directory that `meshtrain import DIR --adapter PEFT_DIR` puts beside the base
// model's tensors (share/docs/usage.md, LoRA adapters in and out): adapter_config.json as the [lora]
// keys, adapter_model.safetensors as meshtrain's adapter tensors, everything checked against the base
// model before anything is written.
#pragma once

#include "core/config.hpp"
#include "hf/hf_config.hpp"
#include "io/safetensors_writer.hpp"

#include <string>
#include <vector>

namespace meshtrain {

struct ImportedAdapter {
  LoraConfig lora;                       // the [lora] keys adapter_config.json means
  std::vector<io::NamedTensor> tensors;  // every adapter tensor, meshtrain's names, the model's order
  std::string config_path, weights_path;
};

// Reads the adapter in `dir` for the base model `base`, of the Hugging Face architecture `architecture`
// (whose module names PEFT uses: Mixtral's experts' w1, w3, w2): its config (hf::read_peft_config's refusals),
// then every tensor of adapter_model.safetensors, which must be exactly the lora_A [r, in] and lora_B
// [out, r] of every targeted module of every layer, each finite. InputError naming the directory's
// file and the tensor that is missing, extra, of another shape or damaged.
ImportedAdapter read_peft_adapter(const std::string& dir, const ModelConfig& base, hf::Architecture architecture);

}  // namespace meshtrain
