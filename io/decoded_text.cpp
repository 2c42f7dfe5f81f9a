// Incremental decoding (io/decoded_text.hpp).
#include "io/decoded_text.hpp"

namespace meshtrain::io {
namespace {

constexpr std::string_view replacement_character = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

}  // namespace

void DecodedText::add(int id) {
  ids_.push_back(id);
  std::string text = tokenizer_.decode(ids_);
  while (text.ends_with(replacement_character)) text.resize(text.size() - replacement_character.size());
  hand_on_up_to(text);
}

void DecodedText::finish() { hand_on_up_to(tokenizer_.decode(ids_)); }

void DecodedText::hand_on_up_to(const std::string& text) {
  // Decoded text only ever grows, but for a held-back tail: wait until it extends what was handed on.
  if (text.size() <= handed_.size() || text.compare(0, handed_.size(), handed_) != 0) return;
  out_(std::string_view(text).substr(handed_.size()));
  handed_ = text;
}

}  // namespace meshtrain::io
