// The one verifier of a checkpoint's checksums: loading (checkpoint/load.cpp) and `meshtrain
// inspect` both compare what they read with the stored sums here, so a damaged file is refused by
// both with the same message. They differ only in how the sums of what was read come about: the
// loader adds the ranks' partial sums of their pieces, inspect reads each dataset whole
// (whole_dataset_checksum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace meshtrain::io {

class CheckpointReader;

struct ChecksumTally {
  std::size_t verified = 0;  // datasets whose stored checksum equals what was read
  std::size_t without = 0;   // datasets with no stored checksum (allowed only where not required)
};

// Compares each dataset's stored checksum with read_sum(k), the checksum of what was read of
// datasets[k] (called only for datasets that have one). InputError naming the file and the first
// dataset that differs, or that has no checksum where `required`:
//   "checkpoint 'ck/step_00000004.h5' is corrupt: /model/wte.weight does not match its checksum ..."
ChecksumTally verify_checksums(const CheckpointReader& reader, const std::vector<std::string>& datasets,
                               const std::function<std::uint64_t(std::size_t)>& read_sum, bool required);

// The checksum of a whole dataset, read by this rank alone in blocks of rows (any size of tensor
// fits in bounded memory).
std::uint64_t whole_dataset_checksum(const CheckpointReader& reader, const std::string& dataset);

}  // namespace meshtrain::io
