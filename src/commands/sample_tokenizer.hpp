// The tokenizer `meshtrain sample` encodes and decodes with (share/docs/usage.md, Tokenizers): the
// one a checkpoint records, checked against its hash.
#pragma once

#include "checkpoint/attributes.hpp"
#include "io/tokenizer.hpp"

#include <optional>
#include <string>

namespace meshtrain {

// The tokenizer to sample with: the file the checkpoint records, or `override` (--tokenizer) in
// its place, whose bytes must have the recorded hash; none for a checkpoint without one (byte-level)
// and no override. InputError naming the checkpoint and the file when the file is missing or not a
// SentencePiece model, when its hash differs from the recorded one (both hashes named), or when an
// override is given for a checkpoint that records no tokenizer.
std::optional<io::Tokenizer> sampling_tokenizer(const TokenizerRecord& recorded, const std::string& override,
                                                const std::string& checkpoint);

}  // namespace meshtrain
