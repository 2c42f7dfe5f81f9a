// PEFT's adapter_config.json and tensor names (hf/peft_adapter.hpp).
#include "hf/peft_adapter.hpp"

#include "core/errors.hpp"
#include "core/lora_targets.hpp"
#include "core/regular_file.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace meshtrain::hf {

namespace {

using json = nlohmann::json;

// PeftModel wraps the Hugging Face model as base_model.model.
constexpr std::string_view peft_prefix = "base_model.model.";
// The family's module paths below the PeftModel's prefix: the decoder's `model.` (llama), `transformer.` (gpt2).
std::string_view family_prefix(Arch arch) { return arch == Arch::gpt2 ? "transformer." : "model."; }
// The output head's adapters have no such prefix, as lm_head.weight has none: base_model.model.lm_head.lora_A.weight.
constexpr std::string_view head_prefix = "lm_head.";
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
    input_error("{}: {} = {}, which meshtrain's LoRA does not compute ({})", path_, key, at(key).dump(), why);
  }
  double number(const char* key, std::optional<double> fallback) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      input_error("{}: no '{}', which every LoRA adapter_config.json holds", path_, key);
    }
    if (!at(key).is_number()) input_error("{}: {} = {} is not a number", path_, key, at(key).dump());
    return at(key).get<double>();
  }

 private:
  const json& j_;
  const std::string& path_;
};

// target_modules as module names in the family's order: what lora.targets would name, checked by the one
// rule lora.targets is (core/lora_targets.hpp).
std::string target_list(const PeftFields& f, const std::string& path, const ModelConfig& model) {
  if (!f.has("target_modules")) input_error("{}: no 'target_modules', which names the modules adapted", path);
  const json& given = f.at("target_modules");
  std::vector<std::string> names;
  if (given.is_string()) {
    if (given.get<std::string>() != all_linear) {
      f.refuse("target_modules", "a regular expression; list the module names instead");
    }
    names.push_back(std::string(all_linear));
  } else if (!given.is_array() || given.empty()) {
    input_error("{}: target_modules = {} is not a non-empty list of module names", path, given.dump());
  }
  for (const json& name : given.is_array() ? given : json::array()) {
    if (!name.is_string()) input_error("{}: target_modules holds {}, not a module name", path, name.dump());
    names.push_back(name.get<std::string>());
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

std::string peft_tensor_name(Arch arch, std::string_view name) {
  if (name.starts_with(head_prefix)) return std::string(peft_prefix) + std::string(name);
  return std::string(peft_prefix) + std::string(family_prefix(arch)) + std::string(name);
}

std::optional<std::string> meshtrain_adapter_name(Arch arch, std::string_view peft_name) {
  if (!peft_name.ends_with(".lora_A.weight") && !peft_name.ends_with(".lora_B.weight")) return std::nullopt;
  const std::string head = std::string(peft_prefix) + std::string(head_prefix);
  if (peft_name.starts_with(head)) return std::string(peft_name.substr(peft_prefix.size()));
  const std::string prefix = std::string(peft_prefix) + std::string(family_prefix(arch));
  if (!peft_name.starts_with(prefix)) return std::nullopt;
  return std::string(peft_name.substr(prefix.size()));
}

LoraConfig read_peft_config(const std::string& path, const ModelConfig& model) {
  json j;
  try {
    j = json::parse(read_regular_file(path, "the adapter's config"));
  } catch (const json::parse_error& e) {
    input_error("{}: not valid JSON ({})", path, e.what());
  }
  if (!j.is_object()) input_error("{}: not a JSON object, as PEFT's adapter_config.json is", path);
  const PeftFields f(j, path);
  if (!f.has("peft_type") || f.at("peft_type") != "LORA") {
    input_error("{}: peft_type = {}: meshtrain reads LoRA adapters (peft_type \"LORA\")", path,
                f.has("peft_type") ? f.at("peft_type").dump() : "absent");
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
    input_error("{}: r = {} is not a rank in 1..65536", path, f.has("r") ? f.at("r").dump() : "absent");
  }
  lora.rank = f.at("r").get<int>();
  lora.alpha = f.number("lora_alpha", std::nullopt);
  lora.dropout = f.number("lora_dropout", 0.0);
  if (f.has("use_rslora") && !f.at("use_rslora").is_boolean()) {
    input_error("{}: use_rslora = {} is not true or false", path, f.at("use_rslora").dump());
  }
  lora.rslora = f.has("use_rslora") && f.at("use_rslora").get<bool>();
  lora.targets = target_list(f, path, model);
  return lora;
}

json peft_config_json(const ModelConfig& model, const std::string& base) {
  const LoraConfig& lora = model.lora;
  std::vector<std::string> targets = lora_target_names(model);
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
