// PEFT's LoRA adapter directory (share/docs/usage.md, LoRA adapters in and out): adapter_config.json
// and adapter_model.safetensors as PEFT's save_pretrained writes them for a causal LM, read by
// `meshtrain import --adapter` and written by `meshtrain export --format peft`.
//
// PEFT names a tensor after the module path in the PeftModel: base_model.model.<Hugging Face module
// path>.lora_A.weight [r, in] and .lora_B.weight [out, r] (the adapter name `default` left out), and
// computes y = W x + s · B A drop(x) with s = lora_alpha / r (lora_alpha / √r under use_rslora): the
// [lora] keys' model exactly, so the keys map one to one.
#pragma once

#include "core/config.hpp"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace meshtrain::hf {

inline constexpr const char* peft_config_file = "adapter_config.json";
inline constexpr const char* peft_weights_file = "adapter_model.safetensors";

// PEFT's name of an adapter tensor of the family `arch`: "layers.0.self_attn.q_proj.lora_A.weight" ->
// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" (llama), "h.0.attn.c_attn.lora_A.weight"
// -> "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight" (gpt2).
std::string peft_tensor_name(Arch arch, std::string_view name);
// meshtrain's name of a PEFT adapter tensor; nothing for a name not of PEFT's form above.
std::optional<std::string> meshtrain_adapter_name(Arch arch, std::string_view peft_name);

// The [lora] keys an adapter_config.json (at `path`) means for `model`'s family: r, lora_alpha,
// lora_dropout, target_modules (a list of module names, or "all-linear") in the family's order, and
// use_rslora. Refused, naming the file and the key, is what this LoRA does not compute: another
// peft_type or task_type, use_dora, bias other than "none", lora_bias, a non-empty rank_pattern,
// alpha_pattern, modules_to_save, exclude_modules or target_parameters, layers_to_transform,
// fan_in_fan_out for llama (its weights are [out, in]; gpt2's Conv1D takes either, as PEFT does), target_modules as a
// regular expression or naming a module outside lora_module_names; and a missing or mistyped r, lora_alpha or
// lora_dropout.
LoraConfig read_peft_config(const std::string& path, const ModelConfig& model);

// adapter_config.json for `model`'s [lora] keys (lora.rank > 0): what PEFT writes for that adapter,
// with base_model_name_or_path = `base` (the base model's file); fan_in_fan_out true for gpt2, as PEFT
// writes it for Conv1D.
nlohmann::json peft_config_json(const ModelConfig& model, const std::string& base);

}  // namespace meshtrain::hf
