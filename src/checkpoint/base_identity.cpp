// The base model's identity from its tensors' stored checksums (checkpoint/base_identity.hpp).
#include "checkpoint/base_identity.hpp"

#include "core/errors.hpp"
#include "core/lora_targets.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <xxhash.h>

#include <array>
#include <cstdint>
#include <memory>

namespace meshtrain {

std::string base_model_hash(const std::string& path) {
  const io::CheckpointReader reader(path, MPI_COMM_SELF);
  return base_model_hash(reader);
}

std::string base_model_hash(const io::CheckpointReader& reader) {
  const std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(), &XXH64_freeState);
  XXH64_reset(state.get(), 0);
  std::size_t count = 0;
  // datasets() is sorted, so the hash does not depend on the order the file was written in.
  for (const std::string& name : io::schema::model_tensors(reader)) {
    if (is_lora_tensor_name(name)) continue;
    const std::string dataset = io::schema::dataset(io::schema::model_group, name);
    const std::optional<std::uint64_t> checksum = reader.checksum(dataset);
    if (!checksum) {
      input_error(
          "'{}': {} carries no checksum, from which a base model's identity is taken (a version-1 checkpoint or a "
          "weights file of another tool); re-import the model with `meshtrain import`",
          reader.path(), dataset);
    }
    // The name with its terminating zero, so that no two lists of pairs hash the same bytes; the
    // checksum in little-endian order, the same on every machine.
    XXH64_update(state.get(), name.c_str(), name.size() + 1);
    std::array<unsigned char, 8> bytes{};
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(*checksum >> (8 * i));
    XXH64_update(state.get(), bytes.data(), bytes.size());
    ++count;
  }
  if (count == 0) {
    input_error("'{}' holds only LoRA adapters under {}, no base model whose identity could be taken", reader.path(),
                io::schema::model_group);
  }
  return fmt::format("{:016x}", XXH64_digest(state.get()));
}

}  // namespace meshtrain
