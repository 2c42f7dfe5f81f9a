// The tokenizer a checkpoint records against the run's (checkpoint/tokenizer_identity.hpp).
#include "checkpoint/tokenizer_identity.hpp"

#include "io/checkpoint/file.hpp"
#include "io/checkpoint/schema.hpp"
#include "io/tokenizer.hpp"

#include <fmt/format.h>

namespace meshtrain {
namespace {

std::string describe(const TokenizerRecord& t) {
  if (t.path.empty()) return "none (byte-level)";
  return fmt::format("'{}' (xxh64 {})", t.path, io::hash_hex(t.hash));
}

}  // namespace

std::optional<TokenizerRecord> recorded_tokenizer(const io::CheckpointReader& reader, const std::string& path) {
  if (reader.string_attribute(io::schema::attr::format) != io::schema::format_name) return std::nullopt;
  return read_tokenizer_record(reader, path);
}

std::optional<std::string> tokenizer_change(const TokenizerRecord& recorded, const TokenizerRecord& run,
                                            TokenizerChange policy, const std::string& key, const std::string& path) {
  const bool same = recorded.path.empty() ? run.path.empty() : !run.path.empty() && recorded.hash == run.hash;
  if (same) return std::nullopt;
  const std::string what =
      fmt::format("checkpoint '{}' ({}) was trained with tokenizer {}, but this run's data.tokenizer is {}", path, key,
                  describe(recorded), describe(run));
  if (policy == TokenizerChange::refuse) {
    const std::string same_again =
        recorded.path.empty()
            ? std::string("train byte-level, as it was (without data.tokenizer)")
            : fmt::format("give data.tokenizer the model it was trained with (xxh64 {})", io::hash_hex(recorded.hash));
    input_error(
        "{}: its token ids mean other pieces than the run's (data.tokenizer_change = refuse); {}, or set "
        "--data.tokenizer_change allow to train on the new tokenizer's ids from these weights",
        what, same_again);
  }
  return fmt::format(
      "{}; loading it anyway (data.tokenizer_change = allow): every id now means the new tokenizer's "
      "piece, and new checkpoints record {}",
      what, describe(run));
}

}  // namespace meshtrain
