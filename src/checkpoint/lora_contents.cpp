// The tensors of a file holding LoRA adapters (checkpoint/lora_contents.hpp).
#include "checkpoint/lora_contents.hpp"

#include "checkpoint/attributes.hpp"
#include "checkpoint/base_identity.hpp"
#include "core/errors.hpp"
#include "core/lora_targets.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

namespace meshtrain {

namespace {

namespace schema = io::schema;

using Shapes = std::map<std::string, std::vector<std::uint64_t>>;

// `held` must be exactly `wanted`, by name and shape: InputError naming the file and the first
// dataset that is extra, missing or of another shape.
void require_exactly(const io::CheckpointReader& reader, const Shapes& held, const std::vector<ModelTensor>& wanted,
                     std::string_view what, std::string_view whose) {
  Shapes want;
  for (const ModelTensor& t : wanted) want.emplace(t.name, t.shape);
  for (const auto& [name, shape] : held) {
    const auto it = want.find(name);
    if (it == want.end()) {
      input_error("'{}' holds {}, which is no {} of {} ({} of them are)", reader.path(),
                  schema::dataset(schema::model_group, name), what, whose, want.size());
    }
    if (shape != it->second) {
      input_error("'{}': {} has shape [{}], but {} needs [{}]: it is from another model, or damaged", reader.path(),
                  schema::dataset(schema::model_group, name), fmt::join(shape, ", "), whose,
                  fmt::join(it->second, ", "));
    }
  }
  for (const ModelTensor& t : wanted) {
    if (!held.contains(t.name)) {
      input_error("'{}' has no dataset {} (shape [{}]), a {} of {}: the file is incomplete or from another model",
                  reader.path(), schema::dataset(schema::model_group, t.name), fmt::join(t.shape, ", "), what, whose);
    }
  }
}

// The /model datasets and their shapes, adapters and the rest apart.
std::pair<Shapes, Shapes> held_tensors(const io::CheckpointReader& reader) {
  Shapes adapters, others;
  for (const std::string& name : schema::model_tensors(reader)) {
    (is_lora_tensor_name(name) ? adapters : others)[name] = reader.shape(schema::dataset(schema::model_group, name));
  }
  return {adapters, others};
}

}  // namespace

std::vector<AdaptedWeight> adapted_weights(const ModelConfig& model) {
  // The adapters as the model's adapter layout lists them (model/lora_adapters.hpp), A before B of each
  // module, each beside the base weight it adapts ("<path>.lora_A.weight" adapts "<path>.weight").
  std::map<std::string, ModelTensor> base;
  for (ModelTensor& t : model_tensors(model)) base.emplace(t.name, std::move(t));
  const std::vector<ModelTensor> adapters = model_tensors(model, LayoutContent::adapters);
  std::vector<AdaptedWeight> adapted;
  for (std::size_t k = 0; k + 1 < adapters.size(); k += 2) {
    const std::string& a = adapters[k].name;
    const std::string path = a.substr(0, a.size() - std::string_view(".lora_A.weight").size());
    adapted.push_back({base.at(path + ".weight"), adapters[k], adapters[k + 1]});
  }
  return adapted;
}

bool stored_config_has_lora(const io::CheckpointReader& reader) {
  schema::require_known_version(reader);  // before its config is parsed, as loading checks it
  if (reader.string_attribute(schema::attr::format) != schema::format_name) return false;
  const std::optional<Config> stored = read_stored_config(reader, reader.path());
  return stored && stored->model.lora.enabled();
}

LoraFile checked_lora_file(const io::CheckpointReader& reader, std::string_view wanted_for) {
  schema::require_known_version(reader);
  const std::optional<Config> stored = reader.string_attribute(schema::attr::format) == schema::format_name
                                           ? read_stored_config(reader, reader.path())
                                           : std::nullopt;
  if (!stored || !stored->model.lora.enabled()) {
    input_error(
        "'{}' holds no LoRA adapters ({}): {} needs a LoRA training checkpoint (lora.rank > 0) or a file of "
        "`meshtrain import DIR --adapter PEFT_DIR`",
        reader.path(), stored ? "its stored config has lora.rank = 0" : "it holds no meshtrain config", wanted_for);
  }
  LoraFile file{*stored, adapted_weights(stored->model), false};
  const auto [adapters, others] = held_tensors(reader);
  std::vector<ModelTensor> wanted_adapters;
  for (const AdaptedWeight& w : file.adapted) {
    wanted_adapters.push_back(w.a);
    wanted_adapters.push_back(w.b);
  }
  const std::string whose = fmt::format("the adapters of its stored config (lora.rank = {}, lora.targets = {})",
                                        stored->model.lora.rank, stored->model.lora.targets);
  require_exactly(reader, adapters, wanted_adapters, "adapter tensor", whose);
  file.holds_base = !others.empty();
  if (file.holds_base) {
    require_exactly(reader, others, model_tensors(stored->model), "base tensor", "the model of its stored config");
  }
  return file;
}

void require_base_tensors(const io::CheckpointReader& reader, const ModelConfig& model, std::string_view whose) {
  schema::require_known_version(reader);
  require_exactly(reader, held_tensors(reader).second, model_tensors(model), "base tensor", whose);
}

}  // namespace meshtrain
