// PEFT's adapter_config.json and tensor names (hf/peft_adapter.hpp).
#include "hf/peft_adapter.hpp"

#include "core/errors.hpp"
#include "core/lora_targets.hpp"
#include "core/regular_file.hpp"
#include "io/json_input.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace meshtrain::hf {

namespace {

using json = nlohmann::json;

// PeftModel wraps the Hugging Face model as base_model.model.
constexpr std::string_view peft_prefix = "base_model.model.";
constexpr std::string_view weight_suffix = ".weight";
constexpr std::string_view all_linear = "all-linear";

// adapter_config.json's keys, each read with the file and the key named in every message. A key that
// is absent or null takes PEFT's default.
class PeftFields {
 public:
  PeftFields(const json& j, const std::string& path) : j_(j), path_(path) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& at(const char* key) const { return j_.at(key); }

  // Refuses `key` unless absent or null or equal to `supported`; `why` says what meshtrain computes.
  void require(const char* key, const json& supported, const char* why) const {
    if (has(key) && at(key) != supported) refuse(key, why);
  }
  // Refuses `key` unless absent, null or an empty list or map.
  void require_empty(const char* key, const char* why) const {
    if (has(key) && !((at(key).is_array() || at(key).is_object()) && at(key).empty())) refuse(key, why);
  }
  [[noreturn]] void refuse(const char* key, const char* why) const {
    input_error("{}: {} = {}, which meshtrain's LoRA does not compute ({})", path_, key, io::json_excerpt(at(key)),
                why);
  }
  double number(const char* key, std::optional<double> fallback) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      input_error("{}: no '{}', which every LoRA adapter_config.json holds", path_, key);
    }
    if (!at(key).is_number()) input_error("{}: {} = {} is not a number", path_, key, io::json_excerpt(at(key)));
    return at(key).get<double>();
  }

 private:
  const json& j_;
  const std::string& path_;
};

// "<path>.lora_A.weight" split into "<path>" and ".lora_A.weight" (lora_B alike); nothing for another name.
std::optional<std::pair<std::string_view, std::string_view>> split_adapter_name(std::string_view name) {
  for (const std::string_view part : {std::string_view(".lora_A.weight"), std::string_view(".lora_B.weight")}) {
    if (name.ends_with(part)) return std::pair(name.substr(0, name.size() - part.size()), part);
  }
  return std::nullopt;
}

// target_modules' name in `a` as lora.targets names the module: Mixtral's w1 is gate_proj. A name lora.targets
// knows that `a` calls otherwise (gate_proj on Mixtral) is no module of `a`: PEFT would find none.
std::string meshtrain_module_name(const std::string& path, const std::string& name, const ModelConfig& model,
                                  Architecture a) {
  for (const std::string& ours : lora_module_names(model)) {
    const std::string theirs = peft_module_name(a, ours);
    if (theirs == name) return ours;
    if (ours == name) {
      input_error("{}: target_modules names '{}', no module of a {}: its name there is '{}'", path, name,
                  architecture_name(a), theirs);
    }
  }
  return name;
}

// target_modules as module names in the family's order: what lora.targets would name, checked by the one
// rule lora.targets is (core/lora_targets.hpp).
std::string target_list(const PeftFields& f, const std::string& path, const ModelConfig& model, Architecture a) {
  if (!f.has("target_modules")) input_error("{}: no 'target_modules', which names the modules adapted", path);
  const json& given = f.at("target_modules");
  std::vector<std::string> names;
  if (given.is_string()) {
    if (given.get<std::string>() != all_linear) {
      f.refuse("target_modules", "a regular expression; list the module names instead");
    }
    names.push_back(std::string(all_linear));
  } else if (!given.is_array() || given.empty()) {
    input_error("{}: target_modules = {} is not a non-empty list of module names", path, io::json_excerpt(given));
  }
  for (const json& name : given.is_array() ? given : json::array()) {
    if (!name.is_string()) input_error("{}: target_modules holds {}, not a module name", path, io::json_excerpt(name));
    names.push_back(meshtrain_module_name(path, name.get<std::string>(), model, a));
  }
  ModelConfig adapted = model;
  adapted.lora.rank = 1;
  adapted.lora.targets = fmt::format("{}", fmt::join(names, ","));
  try {
    return fmt::format("{}", fmt::join(lora_target_names(adapted), ","));
  } catch (const InputError& e) {
    input_error("{}: target_modules: {}", path, e.what());
  }
}

}  // namespace

// The adapter's module path is that of the weight it adapts: one name mapping, hf_tensor_name's.
std::string peft_tensor_name(Architecture a, std::string_view name) {
  const auto split = split_adapter_name(name);
  if (!split) throw std::logic_error(fmt::format("peft_tensor_name of '{}', which is no adapter tensor", name));
  const std::string base = hf_tensor_name(a, std::string(split->first) + std::string(weight_suffix));
  return std::string(peft_prefix) + base.substr(0, base.size() - weight_suffix.size()) + std::string(split->second);
}

std::optional<std::string> meshtrain_adapter_name(Architecture a, std::string_view peft_name) {
  const auto split = split_adapter_name(peft_name);
  if (!split || !peft_name.starts_with(peft_prefix)) return std::nullopt;
  const std::optional<std::string> base =
      meshtrain_tensor_name(a, std::string(split->first.substr(peft_prefix.size())) + std::string(weight_suffix));
  if (!base || !base->ends_with(weight_suffix)) return std::nullopt;
  std::string ours = base->substr(0, base->size() - weight_suffix.size()) + std::string(split->second);
  // meshtrain_tensor_name passes names it does not map (Mixtral's experts.0.gate_proj, gpt2's without
  // `transformer.`) through: only a name PEFT would write is one.
  if (peft_tensor_name(a, ours) != peft_name) return std::nullopt;
  return ours;
}

std::string peft_module_name(Architecture a, std::string_view module) {
  // Mixtral's SwiGLUs are its routed experts, named after their weights: the last part of an expert weight's
  // module path (w1 for gate_proj). Every other module keeps its name.
  constexpr std::array<std::string_view, 3> swiglu{"gate_proj", "up_proj", "down_proj"};
  if (a != Architecture::mixtral || std::find(swiglu.begin(), swiglu.end(), module) == swiglu.end()) {
    return std::string(module);
  }
  const std::string weight = hf_tensor_name(a, fmt::format("layers.0.mlp.experts.0.{}{}", module, weight_suffix));
  const std::string path = weight.substr(0, weight.size() - weight_suffix.size());
  return path.substr(path.rfind('.') + 1);
}

LoraConfig read_peft_config(const std::string& path, const ModelConfig& model, Architecture a) {
  json j;
  try {
    j = io::parse_json_input(read_regular_file(path, "the adapter's config"), io::DuplicateKeys::refused);
  } catch (const io::JsonInputError& e) {
    input_error("{}: not valid JSON ({})", path, e.located());
  }
  if (!j.is_object()) input_error("{}: not a JSON object, as PEFT's adapter_config.json is", path);
  const PeftFields f(j, path);
  if (!f.has("peft_type") || f.at("peft_type") != "LORA") {
    input_error("{}: peft_type = {}: meshtrain reads LoRA adapters (peft_type \"LORA\")", path,
                f.has("peft_type") ? io::json_excerpt(f.at("peft_type")) : "absent");
  }
  f.require("task_type", "CAUSAL_LM", "meshtrain's models are causal language models, CAUSAL_LM");
  f.require("use_dora", false, "DoRA's magnitude vectors are no part of it");
  f.require("bias", "none", "the adapters train no bias: bias \"none\"");
  f.require("lora_bias", false, "lora_B has no bias");
  // gpt2's Conv1D weights are [in, out]: PEFT adapts them with fan_in_fan_out true whatever the file says
  // (it warns and sets it), and the adapters' shapes are the same either way.
  if (model.arch == Arch::llama) {
    f.require("fan_in_fan_out", false, "the llama family stores weights [out, in], as nn.Linear does");
  }
  f.require_empty("rank_pattern", "one rank for every module");
  f.require_empty("alpha_pattern", "one alpha for every module");
  f.require_empty("modules_to_save", "only the adapters are trained, no full module beside them");
  f.require_empty("exclude_modules", "every module of target_modules is adapted in every layer");
  f.require_empty("target_parameters", "adapters wrap linear modules only");
  if (f.has("layers_to_transform")) f.refuse("layers_to_transform", "every layer is adapted");

  LoraConfig lora;
  if (!f.has("r") || !f.at("r").is_number_integer() || f.at("r").get<std::int64_t>() < 1 ||
      f.at("r").get<std::int64_t>() > 65536) {
    input_error("{}: r = {} is not a rank in 1..65536", path, f.has("r") ? io::json_excerpt(f.at("r")) : "absent");
  }
  lora.rank = f.at("r").get<int>();
  lora.alpha = f.number("lora_alpha", std::nullopt);
  lora.dropout = f.number("lora_dropout", 0.0);
  if (f.has("use_rslora") && !f.at("use_rslora").is_boolean()) {
    input_error("{}: use_rslora = {} is not true or false", path, io::json_excerpt(f.at("use_rslora")));
  }
  lora.rslora = f.has("use_rslora") && f.at("use_rslora").get<bool>();
  lora.targets = target_list(f, path, model, a);
  return lora;
}

json peft_config_json(const ModelConfig& model, const std::string& base) {
  const LoraConfig& lora = model.lora;
  const Architecture a = export_architecture(model);
  std::vector<std::string> targets;
  for (const std::string& module : lora_target_names(model)) targets.push_back(peft_module_name(a, module));
  std::sort(targets.begin(), targets.end());  // PEFT writes its set of names sorted
  // PEFT's lora_alpha is an int where it is one.
  const json alpha = lora.alpha == std::floor(lora.alpha) && std::abs(lora.alpha) < 1e15
                         ? json(static_cast<std::int64_t>(lora.alpha))
                         : json(lora.alpha);
  return {{"alpha_pattern", json::object()},
          {"base_model_name_or_path", base},
          {"bias", "none"},
          {"fan_in_fan_out", model.arch == Arch::gpt2},  // gpt2's Conv1D: PEFT sets it true
          {"inference_mode", true},
          {"init_lora_weights", true},
          {"layers_pattern", nullptr},
          {"layers_to_transform", nullptr},
          {"lora_alpha", alpha},
          {"lora_dropout", lora.dropout},
          {"modules_to_save", nullptr},
          {"peft_type", "LORA"},
          {"r", lora.rank},
          {"rank_pattern", json::object()},
          {"revision", nullptr},
          {"target_modules", targets},
          {"task_type", "CAUSAL_LM"},
          {"use_dora", false},
          {"use_rslora", lora.rslora}};
}

}  // namespace meshtrain::hf
