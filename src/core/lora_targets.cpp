// lora.targets resolved against the model family's adaptable layers.
#include "core/lora_targets.hpp"

#include "core/errors.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

namespace meshtrain {
namespace {

// PEFT's all-linear: every linear layer of the blocks, not the output head.
constexpr std::string_view all_linear = "all-linear";

// Modules of the family that PEFT could adapt but meshtrain's LoRA does not: named in the refusal.
std::vector<std::string> not_adapted(Arch arch) {
  if (arch == Arch::llama) return {"embed_tokens"};
  return {"lm_head", "wte"};
}

// Mixtral's names of the routed experts' products, which lora.targets spells as every SwiGLU's.
std::string mixtral_hint(const std::string& name) {
  if (name == "w1") return " (Mixtral's w1 is the experts' gate_proj here)";
  if (name == "w3") return " (Mixtral's w3 is the experts' up_proj here)";
  if (name == "w2") return " (Mixtral's w2 is the experts' down_proj here)";
  return "";
}

// The comma-separated names, trimmed; none for a blank text. A blank entry among names ("q_proj,,v_proj",
// a trailing comma) is refused with its position: a name lost in an edit would otherwise go unnoticed.
std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  if (text.find_first_not_of(" \t") == std::string::npos) return names;
  std::size_t start = 0;
  for (int position = 1;; ++position) {
    const std::size_t comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto first = name.find_first_not_of(" \t"), last = name.find_last_not_of(" \t");
    if (first == std::string::npos) {
      input_error("lora.targets = '{}': entry {} is empty: give comma-separated module names without blank entries",
                  text, position);
    }
    names.push_back(name.substr(first, last - first + 1));
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

}  // namespace

const std::vector<std::string>& lora_module_names(const ModelConfig& model) {
  static const std::vector<std::string> llama = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  static const std::vector<std::string> llama_moe = {"q_proj",    "k_proj",  "v_proj",    "o_proj",
                                                     "gate_proj", "up_proj", "down_proj", lora_router_name};
  static const std::vector<std::string> gpt2 = {"c_attn", "c_proj", "c_fc"};
  if (model.arch == Arch::gpt2) return gpt2;
  return model.experts > 0 ? llama_moe : llama;
}

std::vector<std::string> lora_target_names(const ModelConfig& model) {
  const std::vector<std::string>& known = lora_module_names(model);
  const std::vector<std::string> given = split_names(model.lora.targets);
  if (given.empty()) {
    input_error("lora.targets is empty: name the modules to adapt ({}), or all-linear", fmt::join(known, ","));
  }
  if (model.arch == Arch::llama && model.ties_output_head() &&
      std::find(given.begin(), given.end(), lora_head_name) != given.end()) {
    input_error(
        "lora.targets names lm_head, and model.tie_embeddings = true makes lm_head the embedding: LoRA adapts an "
        "untied lm_head only");
  }
  std::vector<std::string> targets;
  for (const std::string& name : given) {
    if (std::count(given.begin(), given.end(), name) > 1) input_error("lora.targets names '{}' twice", name);
    if (name == all_linear) {
      if (given.size() > 1) input_error("lora.targets = '{}': all-linear stands alone", model.lora.targets);
      return known;
    }
    if (name == lora_head_name && model.arch == Arch::llama) continue;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      const std::vector<std::string> later = not_adapted(model.arch);
      const bool known_later = std::find(later.begin(), later.end(), name) != later.end();
      input_error("lora.targets names '{}', {}{}: valid names are {}{} or all-linear", name,
                  known_later ? "which LoRA does not adapt" : fmt::format("no module of a {} model", model.arch),
                  mixtral_hint(name), fmt::join(known, ","), model.arch == Arch::llama ? ",lm_head" : "");
    }
  }
  for (const std::string& name : known) {
    if (std::find(given.begin(), given.end(), name) != given.end()) targets.push_back(name);
  }
  if (std::find(given.begin(), given.end(), lora_head_name) != given.end()) targets.push_back(lora_head_name);
  return targets;
}

bool lora_drops_expert_inputs(const ModelConfig& model) {
  if (!model.lora.enabled() || model.experts == 0 || model.lora.dropout <= 0) return false;
  const std::vector<std::string> targets = lora_target_names(model);
  return std::any_of(targets.begin(), targets.end(),
                     [](const std::string& t) { return t == "gate_proj" || t == "up_proj" || t == "down_proj"; });
}

bool is_lora_tensor_name(std::string_view name) {
  return name.find(".lora_A.") != std::string_view::npos || name.find(".lora_B.") != std::string_view::npos;
}

bool lora_targets_module(const std::vector<std::string>& targets, const std::string& module) {
  return std::find(targets.begin(), targets.end(), module) != targets.end();
}

}  // namespace meshtrain
