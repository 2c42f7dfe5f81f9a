// LoRA in the planner (issue 28; share/docs/usage.md, `meshtrain plan`): what the planner adds to
// put a LoRA run beside full fine-tuning of the same model and layout. Everything else it asks of
// the code the trainer sizes itself with: the adapters are a ParameterLayout of their own
// (ParameterLayout::adapters, model/lora_adapters.hpp) whose states planned_state_memory sizes and
// whose units the data-parallel traffic rules reduce and gather as a dense run's; the frozen base is
// the model's layout, unpadded, in the compute precision (state/frozen_base.hpp); the adapters'
// activations are the model's own activation_elements under model.lora.
//
// Added here:
//   FLOPs    the base's backward computes input gradients only: 4 per parameter and token instead
//            of 6, attention unchanged; each adapter parameter 6 per token that passes it (2 forward,
//            4 backward): a routed expert's k/E of the tokens (active_share), the router's all.
//   traffic  tensor parallel: per targeted module of each block one all-reduce of h [N, r]: in
//            forward where A is split (row-parallel W), in backward where B is (column-parallel W);
//            none for the MoE router's (replicated). An MoE block's routed experts add one per
//            module over the rows its experts receive [received, r]: down's h in forward, gate's
//            and up's gradient in backward (model/families/llama_moe.cpp).
//   counts   the parameters each kind of training trains.
//
// Size letters: r lora.rank, N = micro_batch · seq_len.
#pragma once

#include "core/config.hpp"

#include <cstdint>

namespace meshtrain {

// The model with no adapters: a LoRA run's frozen base, and what full fine-tuning trains.
ModelConfig without_lora(ModelConfig model);
// The same run as full fine-tuning: every key but [lora].
Config full_training(Config cfg);

// Parameters each kind of training trains, global counts: full, every parameter of the model;
// LoRA, Σ r·(in + out) over the targeted modules of every block (an MoE block's router, shared experts
// and every routed expert included): the adapters' layout, summed.
std::int64_t full_trainable_parameters(const ModelConfig& model);
std::int64_t lora_trainable_parameters(const ModelConfig& model);
// The one of the two that `model` trains (LoRA when model.lora is enabled).
std::int64_t trainable_parameters(const ModelConfig& model);

// Model FLOPs per token of one pipeline stage: its forward passes, the whole forward and backward (for a
// dense run stage_flops_per_token's count, the forward a third of it), and of the backward the weight
// gradients' products (what a zero-bubble schedule defers: 2 per trained product parameter).
struct TokenFlops {
  double forward = 0;
  double total = 0;
  double weight = 0;
};
TokenFlops dense_stage_flops(const ModelConfig& model, int stage, int stages);
// LoRA's: the base's products 2 per parameter forward and 2 backward (input gradients only), the
// attention's products as dense, each adapter parameter 2 forward and 4 backward.
TokenFlops lora_stage_flops(const ModelConfig& model, int stage, int stages);
// The one `model` trains.
TokenFlops training_stage_flops(const ModelConfig& model, int stage, int stages);

// Targeted modules of global block `block` by their base's tensor-parallel split
// (LoraModule::row_parallel): how many all-reduces LoRA adds to the block, in backward and in
// forward; of h [N, r] for the block's own modules (lora_block_modules; the MoE router replicated,
// in neither), of h [received, r] for its routed experts' (one per module, over all the experts the
// rank holds: lora_expert_modules).
struct LoraModuleSplit {
  int column_parallel = 0;
  int row_parallel = 0;
  int expert_column_parallel = 0;  // gate_proj, up_proj of the routed experts
  int expert_row_parallel = 0;     // their down_proj
};
LoraModuleSplit lora_module_split(const ModelConfig& model, int block);

}  // namespace meshtrain
