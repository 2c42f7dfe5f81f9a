// The tokenizer `sample` decodes with (commands/sample_tokenizer.hpp).
#include "commands/sample_tokenizer.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"

#include <fmt/format.h>

namespace meshtrain {

std::optional<io::Tokenizer> sampling_tokenizer(const TokenizerRecord& recorded, const std::string& override,
                                                const std::string& checkpoint) {
  if (recorded.path.empty()) {
    if (override.empty()) return std::nullopt;
    input_error(
        "--tokenizer '{}': checkpoint '{}' records no tokenizer (it was trained on byte-level data, or without "
        "data.tokenizer), so there is no hash to check the file against; sample it without --tokenizer",
        override, checkpoint);
  }
  const std::string& path = override.empty() ? recorded.path : override;
  const std::string problem = regular_file_problem(path, "tokenizer");
  if (!problem.empty()) {
    input_error("checkpoint '{}' was trained with tokenizer '{}': {}; give the model file with --tokenizer PATH",
                checkpoint, recorded.path, problem);
  }
  io::Tokenizer tokenizer = io::Tokenizer::load(path);
  if (tokenizer.content_hash() != recorded.hash) {
    input_error(
        "tokenizer '{}' is not the one checkpoint '{}' was trained with: its xxh64 is {}, the checkpoint records {} "
        "(for '{}'); give the original model file with --tokenizer PATH",
        path, checkpoint, io::hash_hex(tokenizer.content_hash()), io::hash_hex(recorded.hash), recorded.path);
  }
  return tokenizer;
}

}  // namespace meshtrain
