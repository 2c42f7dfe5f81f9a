// A checkpoint's tensors against the model that loads it (checkpoint/contents.hpp).
#include "checkpoint/contents.hpp"

#include "checkpoint/attributes.hpp"
#include "checkpoint/lora_contents.hpp"
#include "core/errors.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"
#include "model/lora_adapters.hpp"
#include "model/parameters.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>

namespace meshtrain {

std::vector<ModelTensor> model_tensors(const ModelConfig& model, LayoutContent content) {
  std::vector<ModelTensor> tensors;
  // named: a temporary's tensors() would dangle in the loop
  const ParameterLayout layout(model, 1, 0, {}, 1, 1, 0, content);
  for (const TensorInfo& t : layout.tensors()) tensors.push_back({t.name, t.shape});
  return tensors;
}

void require_model_tensors(const io::CheckpointReader& reader, const ModelConfig& model,
                           const std::vector<const char*>& groups, std::string_view whose, LayoutContent content) {
  const std::vector<ModelTensor> tensors = model_tensors(model, content);
  // A LoRA run's base and adapters may share a file (import --adapter): each load skips the other's tensors.
  const bool lora = model.lora.enabled();
  const auto other_kind = [&](const std::string& name) {
    return lora && is_lora_tensor_name(name) != (content == LayoutContent::adapters);
  };
  std::map<std::string, std::vector<std::uint64_t>> wanted;
  for (const ModelTensor& t : tensors) wanted.emplace(t.name, t.shape);
  for (const char* group : groups) {
    const std::vector<std::string> held = reader.datasets(group);
    const std::set<std::string> held_names(held.begin(), held.end());
    for (const std::string& name : held) {
      if (other_kind(name)) continue;
      const auto it = wanted.find(name);
      if (it == wanted.end()) {
        input_error(
            "'{}' holds {}, which {} has no place for: it is from another model ({} holds {} tensors, {} has {}); "
            "set the model keys to the file's",
            reader.path(), io::schema::dataset(group, name), whose, group, held.size(), whose, wanted.size());
      }
      const std::vector<std::uint64_t> shape = reader.shape(io::schema::dataset(group, name));
      if (shape != it->second) {
        input_error("'{}': {} has shape [{}], but {} needs [{}]: it is from another model, or damaged", reader.path(),
                    io::schema::dataset(group, name), fmt::join(shape, ", "), whose, fmt::join(it->second, ", "));
      }
    }
    for (const ModelTensor& t : tensors) {
      if (!held_names.contains(t.name)) {
        input_error("'{}' has no dataset {} (shape [{}]), which {} needs: it is from another model, or damaged",
                    reader.path(), io::schema::dataset(group, t.name), fmt::join(t.shape, ", "), whose);
      }
    }
  }
}

std::optional<Config> checked_stored_model(const io::CheckpointReader& reader, bool with_optimizer) {
  io::schema::require_known_version(reader);
  io::schema::model_tensors(reader);
  if (reader.string_attribute(io::schema::attr::format) != io::schema::format_name) return std::nullopt;
  std::optional<Config> stored = read_stored_config(reader, reader.path());
  if (!stored) {
    input_error("checkpoint '{}' has no {} attribute, which every meshtrain checkpoint stores: it is damaged",
                reader.path(), io::schema::attr::config);
  }
  std::vector<const char*> groups = {io::schema::model_group};
  if (with_optimizer) {
    for (const char* group : {io::schema::exp_avg_group, io::schema::exp_avg_sq_group}) {
      if (!reader.datasets(group).empty()) groups.push_back(group);
    }
  }
  if (stored->model.lora.enabled()) {
    // LoRA: /model holds the adapters (and the base beside them in an import --adapter file), /optim theirs.
    checked_lora_file(reader, "a file whose stored config has lora.rank > 0");
    groups.erase(groups.begin());
    require_model_tensors(reader, stored->model, groups, "the adapters of its stored config", LayoutContent::adapters);
    return stored;
  }
  require_model_tensors(reader, stored->model, groups, "the model of its stored config");
  return stored;
}

}  // namespace meshtrain
