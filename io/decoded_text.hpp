// The text of a growing list of token ids, handed on as it grows (`meshtrain sample`).
#pragma once

#include "io/tokenizer.hpp"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::io {

// A byte piece may end inside a UTF-8 character, which decodes as U+FFFD until the character's
// last byte comes: such a tail is held back, so that what has been handed to `out` is always a
// prefix of the decoded whole, and the whole once finish() has been called.
class DecodedText {
 public:
  DecodedText(const Tokenizer& tokenizer, std::function<void(std::string_view)> out)
      : tokenizer_(tokenizer), out_(std::move(out)) {}
  // Appends `id` and hands on what of the text has become final.
  void add(int id);
  // Hands on the rest of the text, a held-back tail included.
  void finish();

 private:
  void hand_on_up_to(const std::string& text);
  const Tokenizer& tokenizer_;
  std::function<void(std::string_view)> out_;
  std::vector<int> ids_;
  std::string handed_;
};

}  // namespace meshtrain::io
