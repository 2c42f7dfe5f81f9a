// LoRA's counts, FLOPs and tensor-parallel split for the planner (what they follow: lora_plan.hpp).
#include "plan/lora_plan.hpp"

#include "core/model_sizes.hpp"
#include "model/lora_adapters.hpp"
#include "model/parameters.hpp"

namespace meshtrain {
namespace {

// Elements of the adapters of a stage's blocks, global shapes (the whole tp group's), each weighted
// by `share` (1: the count; active_share: the elements a token passes).
template <class Share>
double stage_adapter_parameters(const ModelConfig& model, int stage, int stages, Share share) {
  double n = 0;
  const ParameterLayout adapters = ParameterLayout::adapters(model, 1, 0, StagePlace{stage, stages});
  for (const TensorInfo& t : adapters.tensors()) n += share(t) * double(t.piece.elements());
  return n;
}

// The parameters of the stage's products: stage_flops_per_token's 6·N at seq_len 0, where the
// attention's term (the only one that grows with T) vanishes.
double stage_product_parameters(const ModelConfig& model, int stage, int stages) {
  ModelConfig no_context = without_lora(model);
  no_context.seq_len = 0;
  return stage_flops_per_token(ParameterLayout(no_context, 1, 0, StagePlace{stage, stages})) / 6.0;
}

}  // namespace

ModelConfig without_lora(ModelConfig model) {
  model.lora = LoraConfig{};
  return model;
}

Config full_training(Config cfg) {
  cfg.model = without_lora(cfg.model);
  return cfg;
}

std::int64_t full_trainable_parameters(const ModelConfig& model) {
  return std::int64_t(parameter_count(without_lora(model)).value());
}

std::int64_t lora_trainable_parameters(const ModelConfig& model) {
  return std::int64_t(stage_adapter_parameters(model, 0, 1, [](const TensorInfo&) { return 1.0; }));
}

std::int64_t trainable_parameters(const ModelConfig& model) {
  return model.lora.enabled() ? lora_trainable_parameters(model) : full_trainable_parameters(model);
}

TokenFlops dense_stage_flops(const ModelConfig& model, int stage, int stages) {
  const double total = stage_flops_per_token(ParameterLayout(without_lora(model), 1, 0, StagePlace{stage, stages}));
  return {total / 3, total, 2 * stage_product_parameters(model, stage, stages)};
}

TokenFlops lora_stage_flops(const ModelConfig& model, int stage, int stages) {
  const double dense = dense_stage_flops(model, stage, stages).total;
  const double products = stage_product_parameters(model, stage, stages);
  const double attention = dense - 6 * products;
  // A routed expert's adapters pass the k/E of the tokens its expert does.
  const double adapters =
      stage_adapter_parameters(model, stage, stages, [&](const TensorInfo& t) { return active_share(t, model); });
  return {2 * products + attention / 3 + 2 * adapters, 4 * products + attention + 6 * adapters, 2 * adapters};
}

TokenFlops training_stage_flops(const ModelConfig& model, int stage, int stages) {
  return model.lora.enabled() ? lora_stage_flops(model, stage, stages) : dense_stage_flops(model, stage, stages);
}

LoraModuleSplit lora_module_split(const ModelConfig& model, int block) {
  LoraModuleSplit split;
  for (const LoraModule& module : lora_block_modules(model, block)) {
    // The router's adapter is whole on every tp rank, as the router: nothing to sum.
    if (!lora_adapts(model, module) || module.replicated) continue;
    (module.row_parallel ? split.row_parallel : split.column_parallel) += 1;
  }
  if (!model.is_moe_block(block)) return split;
  for (const LoraModule& module : lora_expert_modules(model, 0)) {
    if (!lora_adapts(model, module)) continue;
    (module.row_parallel ? split.expert_row_parallel : split.expert_column_parallel) += 1;
  }
  return split;
}

}  // namespace meshtrain
