// The rules on which files load: their version, their checksums, their tensors (io/checkpoint/schema.hpp).
#include "io/checkpoint/schema.hpp"

#include "core/errors.hpp"
#include "io/checkpoint/file.hpp"

#include <optional>

namespace meshtrain::io::schema {

bool requires_checksums(const CheckpointReader& reader) {
  return reader.string_attribute(attr::format) == format_name &&
         reader.int_attribute(attr::version) >= first_checksummed_version;
}

void require_known_version(const CheckpointReader& reader) {
  if (reader.string_attribute(attr::format) != format_name) return;
  const std::optional<std::int64_t> found = reader.int_attribute(attr::version);
  if (found && *found >= first_readable_version && *found <= version) return;
  input_error(
      "checkpoint '{}' is of format version {}, but this build of meshtrain reads versions {} to {} of {}; "
      "use the meshtrain that wrote it, or another checkpoint",
      reader.path(), found ? std::to_string(*found) : std::string("<missing>"), first_readable_version, version,
      format_name);
}

std::optional<std::string> model_family(const CheckpointReader& reader) {
  if (auto family = reader.string_attribute(attr::model_family)) return family;
  if (reader.string_attribute(attr::format) == format_name) return std::string(family_before_attribute);
  return std::nullopt;
}

std::vector<std::string> model_tensors(const CheckpointReader& reader) {
  std::vector<std::string> names = reader.datasets(model_group);
  if (names.empty()) {
    input_error(
        "'{}' holds no tensors under {}: it is an HDF5 file but not a meshtrain checkpoint or weights file "
        "(which keep the weights as {}/<tensor>, such as {}/wte.weight)",
        reader.path(), model_group, model_group, model_group);
  }
  return names;
}

}  // namespace meshtrain::io::schema
