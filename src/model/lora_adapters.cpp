// The adaptable modules of each family, the adapter tensors' listing and their views.
#include "model/lora_adapters.hpp"

#include "core/errors.hpp"
#include "core/lora_targets.hpp"

#include <fmt/format.h>

namespace meshtrain {

std::vector<LoraModule> lora_modules(const ModelConfig& m) {
  const std::uint64_t C = std::uint64_t(m.d_model);
  if (m.arch == Arch::gpt2) {
    // c_attn's columns are split by heads with each head's q, k and v together: three groups, as its weight.
    return {{"c_attn", "attn.c_attn", C, 3 * C, false, 3},
            {"c_proj", "attn.c_proj", C, C, true},
            {"c_fc", "mlp.c_fc", C, 4 * C, false},
            {"c_proj", "mlp.c_proj", 4 * C, C, true}};
  }
  const std::uint64_t H = std::uint64_t(m.mlp_hidden());
  const std::uint64_t q = std::uint64_t(m.query_width()), kv = std::uint64_t(m.kv_head_count()) * m.head_size();
  return {{"q_proj", "self_attn.q_proj", C, q, false},  {"k_proj", "self_attn.k_proj", C, kv, false},
          {"v_proj", "self_attn.v_proj", C, kv, false}, {"o_proj", "self_attn.o_proj", q, C, true},
          {"gate_proj", "mlp.gate_proj", C, H, false},  {"up_proj", "mlp.up_proj", C, H, false},
          {"down_proj", "mlp.down_proj", H, C, true}};
}

std::vector<LoraModule> lora_block_modules(const ModelConfig& m, int block) {
  std::vector<LoraModule> modules = lora_modules(m);
  if (!m.is_moe_block(block)) return modules;
  const std::uint64_t C = std::uint64_t(m.d_model), Hs = std::uint64_t(m.shared_hidden());
  modules[4] = {"gate_proj", "mlp.shared_experts.gate_proj", Hs > 0 ? C : 0, Hs, false};
  modules[5] = {"up_proj", "mlp.shared_experts.up_proj", Hs > 0 ? C : 0, Hs, false};
  modules[6] = {"down_proj", "mlp.shared_experts.down_proj", Hs, Hs > 0 ? C : 0, true};
  modules.push_back({lora_router_name, "mlp.gate", C, std::uint64_t(m.experts), false, 1, true});
  return modules;
}

std::vector<LoraModule> lora_expert_modules(const ModelConfig& m, int expert) {
  const std::uint64_t C = std::uint64_t(m.d_model), H = std::uint64_t(m.expert_hidden_size());
  const std::string path = fmt::format("mlp.experts.{}.", expert);
  return {{"gate_proj", path + "gate_proj", C, H, false, 1, false, expert},
          {"up_proj", path + "up_proj", C, H, false, 1, false, expert},
          {"down_proj", path + "down_proj", H, C, true, 1, false, expert}};
}

bool lora_adapts(const ModelConfig& model, const LoraModule& module) {
  return module.present() && lora_targets_module(lora_target_names(model), module.name);
}

std::size_t lora_adapted_module_count(const ModelConfig& model) {
  std::size_t count = 0;
  for (const LoraModule& module : lora_modules(model)) count += lora_adapts(model, module) ? 1 : 0;
  return count;
}

namespace {

// The blocks' prefix of the family's tensor names: llama's layers.{l}, gpt2's h.{l}.
std::string block_prefix(const ModelConfig& m, int block) {
  return m.arch == Arch::gpt2 ? fmt::format("h.{}", block) : fmt::format("layers.{}", block);
}

}  // namespace

std::string lora_a_name(const ModelConfig& model, int block, const LoraModule& module) {
  return fmt::format("{}.{}.lora_A.weight", block_prefix(model, block), module.path);
}
std::string lora_b_name(const ModelConfig& model, int block, const LoraModule& module) {
  return fmt::format("{}.{}.lora_B.weight", block_prefix(model, block), module.path);
}

namespace {

// A and B of one module: a row-parallel module's A split like W's columns and B replicated; a column-parallel
// one's A replicated and B split like W's rows; the router's both whole.
void add_adapter(ParameterLayout& layout, int block, const LoraModule& target) {
  const ModelConfig& m = layout.model();
  const std::uint64_t r = std::uint64_t(m.lora.rank);
  if (target.replicated) {
    layout.add_replicated(lora_a_name(m, block, target), {r, target.in}, InitKind::lora_uniform);
    layout.add_replicated(lora_b_name(m, block, target), {target.out, r}, InitKind::zeros);
  } else if (target.row_parallel) {
    layout.add_split(lora_a_name(m, block, target), {r, target.in}, 1, 1, InitKind::lora_uniform, target.expert);
    layout.add_replicated(lora_b_name(m, block, target), {target.out, r}, InitKind::zeros, target.expert);
  } else {
    layout.add_replicated(lora_a_name(m, block, target), {r, target.in}, InitKind::lora_uniform, target.expert);
    layout.add_split(lora_b_name(m, block, target), {target.out, r}, 0, target.out_groups, InitKind::zeros,
                     target.expert);
  }
}

}  // namespace

// One unit per block (ZeRO gathers and reduces the adapters block by block, as the model's tensors);
// within it the targeted modules in order, A before B. An MoE block's routed experts' adapters follow in
// a unit of their own, as their weights do (reduced over the expert-data-parallel group), expert by expert.
void list_family_adapters(ParameterLayout& layout) {
  const ModelConfig& m = layout.model();
  const std::vector<std::string> targets = lora_target_names(m);
  for (int l = layout.first_layer(); l < layout.first_layer() + layout.stage_layers(); ++l) {
    layout.start_unit(block_prefix(m, l), l);
    for (const LoraModule& module : lora_block_modules(m, l)) {
      if (lora_adapts(m, module)) add_adapter(layout, l, module);
    }
    if (!m.is_moe_block(l)) continue;
    bool unit = false;
    for (int e = layout.first_expert(); e < layout.first_expert() + layout.local_experts(); ++e) {
      for (const LoraModule& module : lora_expert_modules(m, e)) {
        if (!lora_adapts(m, module)) continue;
        if (!unit) layout.start_unit(block_prefix(m, l) + ".mlp.experts", l, true);
        unit = true;
        add_adapter(layout, l, module);
      }
    }
  }
  const std::uint64_t r = std::uint64_t(m.lora.rank);
  // The output head, column-parallel by vocabulary rows: B split as lm_head's rows, padding included.
  if (layout.place().last() && lora_targets_module(targets, lora_head_name)) {
    layout.start_unit(lora_head_name, -1);
    layout.add_replicated(std::string(lora_head_name) + ".lora_A.weight", {r, std::uint64_t(m.d_model)},
                          InitKind::lora_uniform);
    layout.add_vocabulary_rows(std::string(lora_head_name) + ".lora_B.weight", r, InitKind::zeros);
  }
}

namespace {

// The adapter of `module` of `block` where `adapters` holds it; an inactive one where it does not.
template <class Real>
LoraAdapter<Real> bind_adapter(const ParameterLayout& adapters, int block, const LoraModule& module,
                               const std::function<Real*(const TensorInfo&)>& weight,
                               const std::function<Real*(const TensorInfo&)>& grad) {
  LoraAdapter<Real> adapter;
  if (!module.present()) return adapter;
  const TensorInfo* a = adapters.find_if_held(lora_a_name(adapters.model(), block, module));
  if (a == nullptr) return adapter;
  const TensorInfo& b = adapters.find(lora_b_name(adapters.model(), block, module));
  adapter.A = Vec<Real>(weight(*a), a->numel);
  adapter.B = Vec<Real>(weight(b), b.numel);
  adapter.dA = Vec<Real>(grad(*a), a->numel);
  adapter.dB = Vec<Real>(grad(b), b.numel);
  return adapter;
}

}  // namespace

template <class Real>
std::vector<std::vector<LoraAdapter<Real>>> bind_lora_adapters(const ParameterLayout& adapters,
                                                               const std::function<Real*(const TensorInfo&)>& weight,
                                                               const std::function<Real*(const TensorInfo&)>& grad) {
  const ModelConfig& model = adapters.model();
  std::vector<std::vector<LoraAdapter<Real>>> blocks(std::size_t(adapters.stage_layers()));
  for (int l = 0; l < adapters.stage_layers(); ++l) {
    const int block = adapters.first_layer() + l;
    for (const LoraModule& module : lora_block_modules(model, block)) {
      blocks[std::size_t(l)].push_back(bind_adapter<Real>(adapters, block, module, weight, grad));
    }
  }
  return blocks;
}

template <class Real>
std::vector<std::vector<std::vector<LoraAdapter<Real>>>> bind_lora_experts(
    const ParameterLayout& adapters, const std::function<Real*(const TensorInfo&)>& weight,
    const std::function<Real*(const TensorInfo&)>& grad) {
  const ModelConfig& model = adapters.model();
  std::vector<std::vector<std::vector<LoraAdapter<Real>>>> blocks(std::size_t(adapters.stage_layers()));
  for (int l = 0; l < adapters.stage_layers(); ++l) {
    const int block = adapters.first_layer() + l;
    if (!model.is_moe_block(block)) continue;
    blocks[std::size_t(l)].resize(3);
    for (int e = adapters.first_expert(); e < adapters.first_expert() + adapters.local_experts(); ++e) {
      const std::vector<LoraModule> modules = lora_expert_modules(model, e);
      for (std::size_t j = 0; j < modules.size(); ++j) {
        if (!lora_adapts(model, modules[j])) continue;
        blocks[std::size_t(l)][j].push_back(bind_adapter<Real>(adapters, block, modules[j], weight, grad));
      }
    }
  }
  return blocks;
}

template <class Real>
LoraAdapter<Real> bind_lora_head(const ParameterLayout& adapters, const std::function<Real*(const TensorInfo&)>& weight,
                                 const std::function<Real*(const TensorInfo&)>& grad) {
  LoraAdapter<Real> head;
  const TensorInfo* a = adapters.find_if_held(std::string(lora_head_name) + ".lora_A.weight");
  if (a == nullptr) return head;
  const TensorInfo& b = adapters.find(std::string(lora_head_name) + ".lora_B.weight");
  head.A = Vec<Real>(weight(*a), a->numel);
  head.B = Vec<Real>(weight(b), b.numel);
  head.dA = Vec<Real>(grad(*a), a->numel);
  head.dB = Vec<Real>(grad(b), b.numel);
  return head;
}

template std::vector<std::vector<std::vector<LoraAdapter<float>>>> bind_lora_experts(
    const ParameterLayout&, const std::function<float*(const TensorInfo&)>&,
    const std::function<float*(const TensorInfo&)>&);
template LoraAdapter<float> bind_lora_head(const ParameterLayout&, const std::function<float*(const TensorInfo&)>&,
                                           const std::function<float*(const TensorInfo&)>&);
template std::vector<std::vector<LoraAdapter<float>>> bind_lora_adapters(
    const ParameterLayout&, const std::function<float*(const TensorInfo&)>&,
    const std::function<float*(const TensorInfo&)>&);
template std::vector<std::vector<std::vector<LoraAdapter<double>>>> bind_lora_experts(
    const ParameterLayout&, const std::function<double*(const TensorInfo&)>&,
    const std::function<double*(const TensorInfo&)>&);
template LoraAdapter<double> bind_lora_head(const ParameterLayout&, const std::function<double*(const TensorInfo&)>&,
                                            const std::function<double*(const TensorInfo&)>&);
template std::vector<std::vector<LoraAdapter<double>>> bind_lora_adapters(
    const ParameterLayout&, const std::function<double*(const TensorInfo&)>&,
    const std::function<double*(const TensorInfo&)>&);
template std::vector<std::vector<std::vector<LoraAdapter<bf16>>>> bind_lora_experts(
    const ParameterLayout&, const std::function<bf16*(const TensorInfo&)>&,
    const std::function<bf16*(const TensorInfo&)>&);
template LoraAdapter<bf16> bind_lora_head(const ParameterLayout&, const std::function<bf16*(const TensorInfo&)>&,
                                          const std::function<bf16*(const TensorInfo&)>&);
template std::vector<std::vector<LoraAdapter<bf16>>> bind_lora_adapters(const ParameterLayout&,
                                                                        const std::function<bf16*(const TensorInfo&)>&,
                                                                        const std::function<bf16*(const TensorInfo&)>&);
template std::vector<std::vector<std::vector<LoraAdapter<fp16>>>> bind_lora_experts(
    const ParameterLayout&, const std::function<fp16*(const TensorInfo&)>&,
    const std::function<fp16*(const TensorInfo&)>&);
template LoraAdapter<fp16> bind_lora_head(const ParameterLayout&, const std::function<fp16*(const TensorInfo&)>&,
                                          const std::function<fp16*(const TensorInfo&)>&);
template std::vector<std::vector<LoraAdapter<fp16>>> bind_lora_adapters(const ParameterLayout&,
                                                                        const std::function<fp16*(const TensorInfo&)>&,
                                                                        const std::function<fp16*(const TensorInfo&)>&);

}  // namespace meshtrain
