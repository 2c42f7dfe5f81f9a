// The tokenizer as part of a checkpoint's identity (share/docs/usage.md, Tokenizers): a token id
// means the piece of one tokenizer, so weights trained on one tokenizer's ids and a run on
// another's disagree about every embedding row. A checkpoint records its tokenizer's path and hash
// (or none: byte-level); loading it into a run of another tokenizer is refused unless
// data.tokenizer_change says the change is meant.
#pragma once

#include "checkpoint/attributes.hpp"
#include "core/agreement.hpp"
#include "core/config.hpp"

#include <optional>
#include <string>

namespace meshtrain {

namespace io {
class CheckpointReader;
}

// The tokenizer a file records: a meshtrain checkpoint's (byte-level when it records none); nothing
// for a weights file of another tool (no meshtrain `format`), which says nothing of its ids.
std::optional<TokenizerRecord> recorded_tokenizer(const io::CheckpointReader& reader, const std::string& path);

// Compares the tokenizer `recorded` in checkpoint `path` with the run's. The same hash is the same
// tokenizer (the path may differ: a moved file) and gives nothing. Another one (or a tokenizer
// dropped or added) is an InputError naming `key` (checkpoint.resume or checkpoint.init_weights),
// the file, both tokenizers with their hashes ("none (byte-level)" for none) and
// data.tokenizer_change, under data.tokenizer_change = refuse; under allow, the warning to print
// (without "warning: ").
// The run's model.vocab already holds the run's tokenizer's ids (train/run_input.cpp checks it at
// start) and the checkpoint's vocabulary is model.vocab (read_progress, the tensor shapes).
std::optional<std::string> tokenizer_change(const TokenizerRecord& recorded, const TokenizerRecord& run,
                                            TokenizerChange policy, const std::string& key, const std::string& path);

// A checkpoint refused for its tokenizer. Not a damaged file: checkpoint.resume = auto does not
// fall back to an older checkpoint past it, which would quietly drop the steps since.
class TokenizerMismatch : public AgreedInputError {
 public:
  using AgreedInputError::AgreedInputError;
};

}  // namespace meshtrain
