// The one rule on which files must carry checksums (io/checkpoint_schema.hpp).
#include "io/checkpoint_schema.hpp"

#include "io/checkpoint_file.hpp"

namespace meshtrain::io::schema {

bool requires_checksums(const CheckpointReader& reader) {
  return reader.string_attribute(attr::format) == format_name &&
         reader.int_attribute(attr::version) >= first_checksummed_version;
}

}  // namespace meshtrain::io::schema
