// What `meshtrain sample` reads and writes as text (share/docs/usage.md, Tokenizers): the tokenizer
// a checkpoint records, checked against its hash, and the generated ids decoded as they come.
#pragma once

#include "io/tokenizer.hpp"
#include "train/checkpoint_attributes.hpp"

#include <optional>
#include <string>
#include <vector>

namespace meshtrain {

// The tokenizer to sample with: the file the checkpoint records, or `override` (--tokenizer) in
// its place, whose bytes must have the recorded hash; none for a checkpoint without one (byte-level)
// and no override. InputError naming the checkpoint and the file when the file is missing or not a
// SentencePiece model, when its hash differs from the recorded one (both hashes named), or when an
// override is given for a checkpoint that records no tokenizer.
std::optional<io::Tokenizer> sampling_tokenizer(const TokenizerRecord& recorded, const std::string& override,
                                                const std::string& checkpoint);

// Prints the text of a growing list of ids as it grows. A byte piece may end inside a UTF-8
// character, which decodes as U+FFFD until the character's last byte comes: such a tail is held
// back, so that the printed text is always a prefix of the decoded whole.
class DecodedPrinter {
 public:
  explicit DecodedPrinter(const io::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // Appends `id` and prints what of the text has become final.
  void add(int id);
  // Prints the rest of the text, held-back tail included.
  void finish();

 private:
  void print_up_to(const std::string& text);
  const io::Tokenizer& tokenizer_;
  std::vector<int> ids_;
  std::string printed_;
};

}  // namespace meshtrain
