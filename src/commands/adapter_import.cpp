// A PEFT adapter directory read against its base model (commands/adapter_import.hpp).
#include "commands/adapter_import.hpp"

#include "checkpoint/lora_contents.hpp"
#include "core/errors.hpp"
#include "hf/peft_adapter.hpp"
#include "io/safetensors_file.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

namespace meshtrain {

ImportedAdapter read_peft_adapter(const std::string& dir, const ModelConfig& base, hf::Architecture architecture) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) {
    input_error("--adapter '{}' is not a directory: it names a PEFT adapter directory ({}, {})", dir,
                hf::peft_config_file, hf::peft_weights_file);
  }
  ImportedAdapter adapter;
  adapter.config_path = (fs::path(dir) / hf::peft_config_file).string();
  adapter.weights_path = (fs::path(dir) / hf::peft_weights_file).string();
  adapter.lora = hf::read_peft_config(adapter.config_path, base, architecture);
  if (!fs::is_regular_file(adapter.weights_path)) {
    input_error("--adapter '{}' has no {}: meshtrain reads adapters saved as safetensors (PEFT's default)", dir,
                hf::peft_weights_file);
  }
  ModelConfig model = base;
  model.lora = adapter.lora;
  const std::vector<AdaptedWeight> adapted = adapted_weights(model);

  const io::SafetensorsFile file(adapter.weights_path);
  std::map<std::string, const io::SafetensorsTensor*> by_name;
  for (const io::SafetensorsTensor& t : file.tensors()) {
    const std::optional<std::string> ours = hf::meshtrain_adapter_name(architecture, t.name);
    if (!ours) {
      input_error(
          "{}: tensor '{}' is no LoRA adapter tensor as PEFT names them for a {} (base_model.model.<its module "
          "path>.lora_A.weight or .lora_B.weight, such as '{}')",
          file.path(), t.name, hf::architecture_name(architecture),
          hf::peft_tensor_name(architecture, adapted[0].a.name));
    }
    by_name.emplace(*ours, &t);
  }
  // Every tensor of the file must be one the base model and the config call for, and every one of those there.
  std::set<std::string> wanted;
  for (const AdaptedWeight& w : adapted) wanted.insert({w.a.name, w.b.name});
  for (const auto& [ours, t] : by_name) {
    if (!wanted.contains(ours)) {
      input_error("{}: tensor '{}' is no adapter of target_modules = {} on this base model ({} layers)", file.path(),
                  t->name, adapter.lora.targets, base.layers);
    }
  }
  for (const AdaptedWeight& w : adapted) {
    for (const ModelTensor* t : {&w.a, &w.b}) {
      const std::string theirs = hf::peft_tensor_name(architecture, t->name);
      const auto it = by_name.find(t->name);
      if (it == by_name.end()) {
        input_error("{}: no tensor '{}' [{}], which target_modules = {} and r = {} need for this base model",
                    file.path(), theirs, fmt::join(t->shape, ", "), adapter.lora.targets, adapter.lora.rank);
      }
      const io::SafetensorsTensor& have = *it->second;
      if (have.shape != t->shape) {
        input_error("{}: tensor '{}' has shape {}, but r = {} on this base model's {} needs [{}]", file.path(),
                    have.name, io::shape_text(have.shape), adapter.lora.rank, w.base.name, fmt::join(t->shape, ", "));
      }
      io::NamedTensor tensor{t->name, t->shape, std::vector<float>(have.elements())};
      file.read(have.name, tensor.values);
      for (std::size_t i = 0; i < tensor.values.size(); ++i) {
        if (!std::isfinite(tensor.values[i])) {
          input_error("{}: tensor '{}' holds a non-finite value ({}) at element {}: the adapter is damaged",
                      file.path(), have.name, tensor.values[i], i);
        }
      }
      adapter.tensors.push_back(std::move(tensor));
    }
  }
  return adapter;
}

}  // namespace meshtrain
