// Stored checksums against what was read (io/checkpoint/checksum_verifier.hpp).
#include "io/checkpoint/checksum_verifier.hpp"

#include "core/errors.hpp"
#include "io/checkpoint/file.hpp"
#include "io/checkpoint/tensor_checksum.hpp"

#include <algorithm>
#include <optional>

namespace meshtrain::io {

ChecksumTally verify_checksums(const CheckpointReader& reader, const std::vector<std::string>& datasets,
                               const std::function<std::uint64_t(std::size_t)>& read_sum, bool required) {
  ChecksumTally tally;
  for (std::size_t k = 0; k < datasets.size(); ++k) {
    const std::string& name = datasets[k];
    const std::optional<std::uint64_t> stored = reader.checksum(name);
    if (!stored && required) {
      input_error(
          "checkpoint '{}': {} has no checksum attribute; the file is damaged or was not written by "
          "meshtrain (resume from another checkpoint)",
          reader.path(), name);
    }
    if (!stored) {
      ++tally.without;
      continue;
    }
    const std::uint64_t read = read_sum(k);
    if (read != *stored) {
      input_error(
          "checkpoint '{}' is corrupt: {} does not match its checksum (stored {:016x}, read {:016x}); "
          "resume from another checkpoint",
          reader.path(), name, *stored, read);
    }
    ++tally.verified;
  }
  return tally;
}

std::uint64_t whole_dataset_checksum(const CheckpointReader& reader, const std::string& dataset) {
  const std::vector<std::uint64_t> shape = reader.shape(dataset);
  if (shape.empty()) return 0;
  std::uint64_t row = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) row *= shape[d];
  // About 2^24 elements (64 MiB of floats) a block, and at least one row.
  const std::uint64_t rows_per_block =
      std::max<std::uint64_t>(1, (std::uint64_t{1} << 24) / std::max<std::uint64_t>(row, 1));
  std::vector<float> buffer;
  std::uint64_t sum = 0;
  for (std::uint64_t r = 0; r < shape[0]; r += rows_per_block) {
    TensorSlab block = TensorSlab::whole(dataset, shape);
    block.offset[0] = r;
    block.extent[0] = std::min(rows_per_block, shape[0] - r);
    buffer.resize(block.elements());
    reader.read(block, buffer.data());
    sum += partial_checksum(block, ElementRange{0, buffer.size()}, buffer.data());
  }
  return sum;
}

}  // namespace meshtrain::io
