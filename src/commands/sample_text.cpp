// The tokenizer `sample` decodes with, and its incremental printing (commands/sample_text.hpp).
#include "commands/sample_text.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <string_view>

namespace meshtrain {
namespace {

constexpr std::string_view replacement_character = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

}  // namespace

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

void DecodedPrinter::add(int id) {
  ids_.push_back(id);
  std::string text = tokenizer_.decode(ids_);
  while (text.ends_with(replacement_character)) text.resize(text.size() - replacement_character.size());
  print_up_to(text);
}

void DecodedPrinter::finish() { print_up_to(tokenizer_.decode(ids_)); }

void DecodedPrinter::print_up_to(const std::string& text) {
  // Text decoded so far never shrinks but for a held-back tail; wait until it extends what is printed.
  if (text.size() <= printed_.size() || text.compare(0, printed_.size(), printed_) != 0) return;
  std::fwrite(text.data() + printed_.size(), 1, text.size() - printed_.size(), stdout);
  std::fflush(stdout);
  printed_ = text;
}

}  // namespace meshtrain
