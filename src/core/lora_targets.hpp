// Which linear layers LoRA adapts (lora.targets, share/docs/usage.md, LoRA): Hugging Face module
// names, matched as PEFT matches target_modules given as names (the module's last name), so that
// a PEFT adapter_config.json's list means here what it means there.
#pragma once

#include "core/config.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain {

// What a parameter layout lists (model/parameters.hpp): the model's own tensors, or the LoRA adapters of
// lora.targets (model/lora_adapters.hpp; the base model's tensors are then frozen, held elsewhere).
enum class LayoutContent { model, adapters };

// A model's adaptable linear layers, in the order of its blocks' products: llama's q_proj, k_proj,
// v_proj, o_proj, gate_proj, up_proj, down_proj, and with experts the router `gate` (Mixtral's and
// Qwen-MoE's name); gpt2's c_attn, c_proj, c_fc. A name takes every module it ends (PEFT's match on the
// module's last name): gpt2's c_proj the attention's and the MLP's, gate_proj, up_proj and down_proj the
// dense MLPs', the shared experts' and every routed expert's (Mixtral's w1, w3 and w2).
const std::vector<std::string>& lora_module_names(const ModelConfig& model);
// The MoE router's module name (mlp.gate).
inline constexpr const char* lora_router_name = "gate";
// The output head (llama's untied lm_head), which lora.targets may name beside the blocks' modules;
// all-linear leaves it out, as PEFT's does.
inline constexpr const char* lora_head_name = "lm_head";

// lora.targets resolved for `model`: the named modules in the family's order (all-linear: every
// adaptable one of the blocks), then lm_head when named. InputError naming lora.targets for an empty
// list, a name the family has not, or a module LoRA cannot adapt here (with what can be).
std::vector<std::string> lora_target_names(const ModelConfig& model);

// Whether lora.dropout applies to routed experts' inputs: lora.dropout > 0 with gate_proj, up_proj or down_proj
// among the targets of a model with experts. Their rows then travel with the (token, expert) each is, which
// their mask is keyed by (kernels/lora_dropout.hpp).
bool lora_drops_expert_inputs(const ModelConfig& model);

// Whether a checkpoint tensor is a LoRA adapter's (`layers.0.self_attn.q_proj.lora_A.weight`) rather than
// one of the model's own.
bool is_lora_tensor_name(std::string_view name);

// Whether `module` (one of lora_module_names) is among the resolved targets.
bool lora_targets_module(const std::vector<std::string>& targets, const std::string& module);

}  // namespace meshtrain
