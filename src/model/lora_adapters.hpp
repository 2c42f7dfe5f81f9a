// LoRA's adapters (share/docs/usage.md, LoRA): which of a family's linear layers carry them, the
// adapter tensors as a ParameterLayout lists them (LayoutContent::adapters), and the views the
// model computes with.
//
// Each adapted module of each block has A (r, in) and B (out, r), named after the module as PEFT names
// them: layers.{l}.self_attn.q_proj.lora_A.weight, h.{l}.attn.c_attn.lora_A.weight (PEFT's shapes for
// gpt2's Conv1D too: its fan_in_fan_out transposes the base weight only). Tensor parallelism (share/docs/design.md,
// LoRA): a column-parallel module (its output rows split, input replicated) keeps A replicated and B split like W's
// rows, so r need not divide tp and the traffic is rank-sized (its h gradient, N × r, summed); a row-parallel module
// (its input columns split) keeps A split like W's columns, its h summed over tp in forward, and B replicated.
#pragma once

#include "kernels/lora.hpp"
#include "model/parameters.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace meshtrain {

// One adaptable linear layer of a block, in global sizes.
struct LoraModule {
  std::string name;  // the Hugging Face module name lora.targets uses: "q_proj"
  std::string path;  // below the block: "self_attn.q_proj"
  std::uint64_t in = 0, out = 0;
  bool row_parallel = false;     // o_proj, down_proj, gpt2's c_proj: the input split over tp; else the output
  std::uint64_t out_groups = 1;  // a column-parallel output cut in equal groups alike (c_attn's q|k|v: 3)
  bool replicated = false;       // the MoE router: whole on every tp rank, A and B too
  int expert = -1;               // a routed expert's module: its global index
  // Whether the block has this module (an MoE block without shared experts has no gate_proj of its own).
  bool present() const { return in > 0 && out > 0; }
};

// Every adaptable module of `model`'s family in the order of its block's products: llama's in the order of
// lora_module_names (core/lora_targets.hpp), gpt2's c_attn, attn.c_proj, c_fc, mlp.c_proj (both c_proj
// named c_proj, as PEFT's match on the last name takes both).
std::vector<LoraModule> lora_modules(const ModelConfig& model);
// The modules of global block `block` in the order the family's LoraModuleIndex numbers them: a dense
// block's are lora_modules'; an MoE block's (llama) put its shared experts' SwiGLU (absent, in == 0,
// without shared experts) in the dense MLP's places, then the router (`gate`, replicated).
std::vector<LoraModule> lora_block_modules(const ModelConfig& model, int block);
// A routed expert's gate_proj, up_proj and down_proj under mlp.experts.{expert} (LoraExpertIndex's order),
// split over tp as the dense SwiGLU's.
std::vector<LoraModule> lora_expert_modules(const ModelConfig& model, int expert);
enum LoraExpertIndex { lora_expert_gate, lora_expert_up, lora_expert_down };
// How many of a dense block's modules lora.targets adapts (gpt2's c_proj counts twice).
std::size_t lora_adapted_module_count(const ModelConfig& model);
// Whether `module` of a block, or of a routed expert, is adapted.
bool lora_adapts(const ModelConfig& model, const LoraModule& module);
// The adapter tensors' names.
std::string lora_a_name(const ModelConfig& model, int block, const LoraModule& module);
std::string lora_b_name(const ModelConfig& model, int block, const LoraModule& module);

// The adapters of each of the stage's blocks ([block][module], modules as lora_modules lists them),
// bound where `weight` and `grad` say each adapter tensor of `adapters` lives.
template <class Real>
std::vector<std::vector<LoraAdapter<Real>>> bind_lora_adapters(const ParameterLayout& adapters,
                                                               const std::function<Real*(const TensorInfo&)>& weight,
                                                               const std::function<Real*(const TensorInfo&)>& grad);

// The routed experts' adapters of each of the stage's MoE blocks ([block][LoraExpertIndex][local expert]; empty
// for a dense block and for modules not adapted), the experts this rank holds.
template <class Real>
std::vector<std::vector<std::vector<LoraAdapter<Real>>>> bind_lora_experts(
    const ParameterLayout& adapters, const std::function<Real*(const TensorInfo&)>& weight,
    const std::function<Real*(const TensorInfo&)>& grad);

// The output head's adapter (lm_head in lora.targets, the last stage), or an inactive one.
template <class Real>
LoraAdapter<Real> bind_lora_head(const ParameterLayout& adapters, const std::function<Real*(const TensorInfo&)>& weight,
                                 const std::function<Real*(const TensorInfo&)>& grad);

}  // namespace meshtrain
