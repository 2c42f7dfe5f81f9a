// PEFT's LoRA adapter directory (share/docs/usage.md, LoRA adapters in and out): adapter_config.json
// and adapter_model.safetensors as PEFT's save_pretrained writes them for a causal LM, read by
// `meshtrain import --adapter` and written by `meshtrain export --format peft`.
//
// PEFT names a tensor after the module path in the PeftModel: base_model.model.<Hugging Face module
// path>.lora_A.weight [r, in] and .lora_B.weight [out, r] (the adapter name `default` left out), the
// module path being that of the adapted weight in the Hugging Face architecture (hf_tensor_name: Mixtral's
// routed experts are block_sparse_moe.experts.{e}.w1|w3|w2, its router block_sparse_moe.gate), and
// computes y = W x + s · B A drop(x) with s = lora_alpha / r (lora_alpha / √r under use_rslora): the
// [lora] keys' model exactly, so the keys map one to one.
#pragma once

#include "core/config.hpp"
#include "hf/hf_config.hpp"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace meshtrain::hf {

inline constexpr const char* peft_config_file = "adapter_config.json";
inline constexpr const char* peft_weights_file = "adapter_model.safetensors";

// PEFT's name of meshtrain's adapter tensor `name` in the Hugging Face architecture `a`:
// "layers.0.self_attn.q_proj.lora_A.weight" -> "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
// (llama), "h.0.attn.c_attn.lora_A.weight" -> "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight" (gpt2),
// "layers.0.mlp.experts.3.gate_proj.lora_B.weight" ->
// "base_model.model.model.layers.0.block_sparse_moe.experts.3.w1.lora_B.weight" (mixtral).
std::string peft_tensor_name(Architecture a, std::string_view name);
// meshtrain's name of a PEFT adapter tensor; nothing for a name that is not what peft_tensor_name gives
// for some meshtrain name (another form, or another architecture's module names).
std::optional<std::string> meshtrain_adapter_name(Architecture a, std::string_view peft_name);
// PEFT's name, in target_modules, of lora.targets' module `module` (core/lora_targets.hpp): the same but
// for Mixtral's experts, gate_proj -> w1, up_proj -> w3, down_proj -> w2.
std::string peft_module_name(Architecture a, std::string_view module);

// The [lora] keys an adapter_config.json (at `path`) means for `model`, of the Hugging Face architecture `a`:
// r, lora_alpha, lora_dropout, target_modules (a list of `a`'s module names, or "all-linear") as lora.targets
// names them in the family's order, and
// use_rslora. Refused, naming the file and the key, is what this LoRA does not compute: another
// peft_type or task_type, use_dora, bias other than "none", lora_bias, a non-empty rank_pattern,
// alpha_pattern, modules_to_save, exclude_modules or target_parameters, layers_to_transform,
// fan_in_fan_out for llama (its weights are [out, in]; gpt2's Conv1D takes either, as PEFT does), target_modules as a
// regular expression or naming a module outside lora_module_names (for Mixtral, gate_proj, up_proj or down_proj,
// which it calls w1, w3, w2); and a missing or mistyped r, lora_alpha or lora_dropout.
LoraConfig read_peft_config(const std::string& path, const ModelConfig& model, Architecture a);

// adapter_config.json for `model`'s [lora] keys (lora.rank > 0): what PEFT writes for that adapter on
// the architecture export_architecture(model) gives (its refusal, naming the key, for a model no Hugging
// Face architecture computes: shared experts, dense blocks among MoE ones, ...), target_modules in its
// names, with base_model_name_or_path = `base` (the base model's file); fan_in_fan_out true for gpt2, as
// PEFT writes it for Conv1D.
nlohmann::json peft_config_json(const ModelConfig& model, const std::string& base);

}  // namespace meshtrain::hf
