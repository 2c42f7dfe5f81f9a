// A checkpoint's root attributes (io/checkpoint/schema.hpp): the training progress and the run's
// description as written, and read back checked against the config.
#pragma once

#include "core/config.hpp"

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace meshtrain {
namespace io {
class CheckpointReader;
}

// What a checkpoint carries besides tensors. The schedule derives from `step`, the data position
// from `samples` (equal to step · global_batch unless the global batch changed between jobs).
struct TrainingProgress {
  std::int64_t step = 0;     // completed optimizer steps
  std::int64_t tokens = 0;   // tokens consumed so far
  std::int64_t samples = 0;  // sequences consumed so far
  // fp16's dynamic loss scale and its count of clean steps (0: none stored, start afresh).
  double loss_scale = 0;
  std::int64_t loss_scale_clean_steps = 0;
};

// The tokenizer a checkpoint's data was made with (share/docs/usage.md, Tokenizers): data.tokenizer
// and the XXH64 of its bytes when training started. An empty path is byte-level.
struct TokenizerRecord {
  std::string path;
  std::uint64_t hash = 0;
};

using AttributeValue = std::variant<std::string, std::int64_t, double>;
using Attributes = std::vector<std::pair<std::string, AttributeValue>>;

// The root attributes of a checkpoint of `progress`, written by a run of `config` over `comm` on
// data made with `tokenizer`.
Attributes root_attributes(const Config& config, MPI_Comm comm, const TrainingProgress& progress,
                           const TokenizerRecord& tokenizer);

// The progress attributes of a checkpoint, checked: a meshtrain checkpoint, of a model of the
// config's shape, with valid counts. InputError naming `path` otherwise.
TrainingProgress read_progress(const io::CheckpointReader& reader, const Config& config, const std::string& path);

// Refuses a checkpoint of another model family than the config's model.arch (InputError naming
// both families), or one whose model_family disagrees with its stored config's model.arch. A
// weights file from another tool records no family and passes (its tensor names are checked).
void require_same_family(const io::CheckpointReader& reader, const Config& config, const std::string& path);

// The resolved config a checkpoint stores (attribute `config`), parsed as the trainer parses an INI
// file and checked against the file's model_family; nothing for a file without one (a weights file
// of another tool). InputError naming the file when it does not parse or names another family.
std::optional<Config> read_stored_config(const io::CheckpointReader& reader, const std::string& path);

// The tokenizer a checkpoint records; byte-level (empty) for files without one, such as those
// written before tokenizers. InputError naming `path` when the hash is not 16 hex digits.
TokenizerRecord read_tokenizer_record(const io::CheckpointReader& reader, const std::string& path);

}  // namespace meshtrain
